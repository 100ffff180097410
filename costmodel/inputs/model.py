"""What runs: a decoder-only transformer's architecture, from the zoo or a Hugging Face config.json.

Parameter count (per layer, gated FFN, biases ignored):
  attention  = d_model·(n_heads + 2·n_kv_heads)·head_dim + n_heads·head_dim·d_model
  FFN        = n_experts · 3·d_model·d_ff  (2·d_model·d_ff when not gated) + router d_model·n_experts
  norms      = 2·d_model
plus embeddings vocab·d_model, an LM head vocab·d_model unless tied, and a final norm d_model.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from costmodel.errors import InputError
from costmodel.inputs.specs import Fields, load_yaml, resolve


@dataclass(frozen=True)
class Model:
    id: str
    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    ffn_type: str = "gated"          # 'gated' (SwiGLU, 3 matrices) or 'plain' (2 matrices)
    tied_embeddings: bool = False
    n_experts: int = 1
    experts_per_token: int = 1
    published_params: float | None = None
    source: str = ""

    # ---- parameter counts -------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def attn_params_per_layer(self) -> int:
        """d·(h + 2·kv)·hd (q, k, v) + h·hd·d (o)."""
        return self.d_model * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.d_model

    @property
    def expert_params(self) -> int:
        """One expert's FFN: 3·d·d_ff gated, 2·d·d_ff plain."""
        return (3 if self.ffn_type == "gated" else 2) * self.d_model * self.d_ff

    @property
    def ffn_params_per_layer(self) -> int:
        router = self.d_model * self.n_experts if self.n_experts > 1 else 0
        return self.n_experts * self.expert_params + router

    @property
    def layer_params(self) -> int:
        return self.attn_params_per_layer + self.ffn_params_per_layer + 2 * self.d_model

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """Total parameters (embeddings and untied LM head included)."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.n_layers * self.layer_params + self.embedding_params + head + self.d_model

    @property
    def active_params_per_token(self) -> int:
        """Parameters one token multiplies through (MoE: only its experts; no embedding gather)."""
        ffn = self.experts_per_token * self.expert_params + (
            self.d_model * self.n_experts if self.n_experts > 1 else 0)
        per_layer = self.attn_params_per_layer + ffn
        return self.n_layers * per_layer + self.lm_head_params

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """K and V for one token over all layers: 2·layers·kv_heads·head_dim·bytes."""
        return 2.0 * self.n_layers * self.kv_dim * kv_bytes_per_element


MODEL_FIELDS = ("id", "name", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                "ffn_type", "vocab_size", "tied_embeddings", "n_experts", "experts_per_token",
                "published_params", "source")


#: largest value of each dimension (far beyond any published model; keeps every parameter count and
#: FLOP product finite and exact in a float64)
MAX_DIM = {"n_layers": 1 << 14, "d_model": 1 << 20, "n_heads": 1 << 16, "n_kv_heads": 1 << 16, "head_dim": 1 << 16,
           "d_ff": 1 << 24, "vocab_size": 1 << 26, "n_experts": 1 << 16, "experts_per_token": 1 << 16}


def _dim(f: Fields, key: str, dim: str | None = None, **kw) -> int:
    """An integer dimension ``key`` in 1..MAX_DIM[dim or key]."""
    return f.num(key, integer=True, min_value=1, max_value=MAX_DIM[dim or key], **kw)


def _from_zoo_yaml(data, src: str) -> Model:
    f = Fields(data, src)
    f.check_keys(MODEL_FIELDS)
    m = Model(
        id=f.text("id"), name=f.text("name"), n_layers=_dim(f, "n_layers"), d_model=_dim(f, "d_model"),
        n_heads=_dim(f, "n_heads"), n_kv_heads=_dim(f, "n_kv_heads"), head_dim=_dim(f, "head_dim"),
        d_ff=_dim(f, "d_ff"), vocab_size=_dim(f, "vocab_size"),
        ffn_type=f.text("ffn_type", required=False, default="gated", choices=("gated", "plain")),
        tied_embeddings=f.flag("tied_embeddings", required=False, default=False),
        n_experts=_dim(f, "n_experts", required=False, default=1),
        experts_per_token=_dim(f, "experts_per_token", required=False, default=1),
        published_params=f.num("published_params", required=False, min_value=0, max_value=1e16),
        source=f.text("source", required=False, default=""),
    )
    _check(m, src)
    return m


def _check(m: Model, src: str) -> None:
    if m.n_heads % m.n_kv_heads:
        raise InputError(f"n_heads ({m.n_heads}) must be a multiple of n_kv_heads", source=src,
                         field="n_kv_heads", value=m.n_kv_heads)
    if m.experts_per_token > m.n_experts:
        raise InputError(f"experts_per_token must be <= n_experts ({m.n_experts})", source=src,
                         field="experts_per_token", value=m.experts_per_token)


def from_hf_config(data, src: str) -> Model:
    """Parse a Hugging Face ``config.json`` (LLaMA/Mistral/Mixtral/Qwen2-style field names)."""
    f = Fields(data, src)
    d = _dim(f, "hidden_size", "d_model")
    heads = _dim(f, "num_attention_heads", "n_heads")
    kv = _dim(f, "num_key_value_heads", "n_kv_heads", required=False, default=heads)
    hd = _dim(f, "head_dim", required=False, default=None, allow_null=True)
    if hd is None:
        if d % heads:
            raise InputError("hidden_size is not divisible by num_attention_heads; give head_dim",
                             source=src, field="head_dim")
        hd = d // heads
    e = _dim(f, "num_local_experts", "n_experts", required=False, default=1, allow_null=True) or 1
    k = _dim(f, "num_experts_per_tok", "experts_per_token", required=False, default=1, allow_null=True) or 1
    act = data.get("hidden_act", "silu")
    model_type = data.get("model_type", "llama")
    gated = not (isinstance(model_type, str) and model_type in ("gpt2", "opt", "gpt_neox", "bloom")) and \
        isinstance(act, str) and act in ("silu", "swiglu", "gelu", "gelu_pytorch_tanh", "geglu")
    name = data.get("_name_or_path")
    name = name if isinstance(name, str) and name else Path(src).parent.name or Path(src).stem
    m = Model(
        id=str(src), name=name[:200], n_layers=_dim(f, "num_hidden_layers", "n_layers"), d_model=d, n_heads=heads,
        n_kv_heads=kv, head_dim=hd, d_ff=_dim(f, "intermediate_size", "d_ff"),
        vocab_size=_dim(f, "vocab_size"),
        ffn_type="gated" if gated else "plain",
        tied_embeddings=f.flag("tie_word_embeddings", required=False, default=False),
        n_experts=e, experts_per_token=k if e > 1 else 1, source=f"Hugging Face config {src}",
    )
    _check(m, src)
    return m


#: largest config.json read (Hugging Face configs are a few KiB; a label table can make one larger)
MAX_JSON_BYTES = 4 << 20


def read_json(path: str):
    """A JSON file (UTF-8, at most MAX_JSON_BYTES, nesting within the parser's recursion limit);
    anything else is an InputError naming the file."""
    from costmodel.inputs.specs import input_path
    p = input_path(path, "a config.json file")
    try:
        size = p.stat().st_size
        if size > MAX_JSON_BYTES:
            raise InputError(f"file too large ({size} bytes)", source=path, allowed=f"at most {MAX_JSON_BYTES} bytes")
        text = p.read_bytes().decode("utf-8")
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                         source=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start}): a config.json is UTF-8 JSON", source=path) from None
    except RecursionError:
        raise InputError("malformed JSON: nested too deeply", source=path) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or type(exc).__name__}", source=path) from None


@functools.lru_cache(maxsize=256)
def _load_path(path: str) -> Model:
    if path.endswith(".json"):
        return from_hf_config(read_json(path), path)
    data = load_yaml(path)
    if isinstance(data, dict) and "hidden_size" in data:
        return from_hf_config(data, path)
    return _from_zoo_yaml(data, path)


def load_model(id_or_path, field: str = "model") -> Model:
    """Zoo id (case-insensitive), model YAML, or Hugging Face config.json -> :class:`Model`."""
    if isinstance(id_or_path, Model):
        return id_or_path
    return _load_path(str(resolve("model_specs", id_or_path, field)))
