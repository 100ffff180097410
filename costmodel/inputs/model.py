"""What runs: a decoder-only transformer's architecture, from the zoo or a Hugging Face config.json.

Parameter count (per layer, gated FFN, biases ignored):
  attention  = d_model·(n_heads + 2·n_kv_heads)·head_dim + n_heads·head_dim·d_model
  MLA        = d·q_lora + q_lora·h·(nope + rope)        (q; d·h·(nope + rope) without q_lora)
               + d·(kv_lora + rope) + kv_lora·h·(nope + v) + h·v·d          (kv down, kv up, o)
  FFN        = 3·d_model·d_ff (2·d_model·d_ff when not gated) on a dense layer;
               on a MoE layer (n_experts + n_shared_experts)·3·d_model·moe_d_ff + router d_model·n_experts
  norms      = 2·d_model (+ q_lora + kv_lora for MLA)
plus embeddings vocab·d_model, an LM head vocab·d_model unless tied, and a final norm d_model.
A model has ``n_moe_layers`` = (n_layers − first_dense_layers) // moe_layer_freq MoE layers (0 for a
dense model) and dense FFN layers for the rest.

Attention per layer kind: ``n_window_layers`` layers attend over at most ``attention_window`` past
tokens (sliding window, or chunked attention whose chunk holds at most that many); the others
(every ``global_layer_every``-th layer; none when 0) attend over the whole context. KV per token
per layer: 2·n_kv_heads·head_dim elements, or kv_lora_rank + qk_rope_head_dim for MLA (one latent
shared by every head).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np

from costmodel.errors import InputError
from costmodel.inputs.specs import Fields, load_yaml, resolve

WINDOW_KINDS = ("sliding", "chunked")


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V are up-projected from one latent of
    ``kv_lora_rank`` elements per token and layer, plus a shared RoPE key of ``qk_rope_head_dim``."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


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
    max_context: int | None = None   # longest context (prompt + generated tokens) the model supports
    moe_d_ff: int | None = None      # width of one routed/shared expert (None: d_ff)
    n_shared_experts: int = 0        # experts every token runs besides its top-k
    first_dense_layers: int = 0      # leading layers with a dense FFN of d_ff
    moe_layer_freq: int = 1          # every k-th layer after those is MoE (Llama-4-Maverick: 2)
    attention_window: int | None = None  # tokens a windowed layer attends over (None: no window)
    window_kind: str = "sliding"     # 'sliding' (Mistral v0.1, Gemma, gpt-oss) or 'chunked' (Llama-4)
    global_layer_every: int = 0      # every k-th layer attends globally; 0 = every layer windowed
    mla: MLA | None = None
    mtp_layers: int = 0              # multi-token-prediction modules shipped with the model
    published_active_params: float | None = None
    published_params_rounding: float = 0.0   # half the last digit of a rounded figure ("1T": 5e10)
    published_params_scope: str = "text"   # 'text+vision': the published count includes a vision encoder

    # ---- layer kinds ------------------------------------------------------
    @property
    def n_moe_layers(self) -> int:
        if self.n_experts <= 1:
            return 0
        return (self.n_layers - self.first_dense_layers) // self.moe_layer_freq

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def n_window_layers(self) -> int:
        """Layers whose attention spans at most ``attention_window`` tokens."""
        if self.attention_window is None:
            return 0
        return self.n_layers - (self.n_layers // self.global_layer_every if self.global_layer_every else 0)

    @property
    def n_global_layers(self) -> int:
        return self.n_layers - self.n_window_layers

    @property
    def expert_d_ff(self) -> int:
        return self.d_ff if self.moe_d_ff is None else self.moe_d_ff

    # ---- parameter counts -------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the queries (MLA: heads·(nope + rope))."""
        if self.mla is not None:
            return self.n_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.n_heads * self.head_dim

    @property
    def o_dim(self) -> int:
        """Input width of the output projection (MLA: heads·v_head_dim)."""
        return self.n_heads * self.mla.v_head_dim if self.mla is not None else self.q_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def kv_elements_per_token_layer(self) -> int:
        """KV cache elements of one token in one layer: 2·kv_heads·head_dim, MLA kv_lora + rope."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.kv_dim

    @property
    def mla_kv_up_params(self) -> int:
        """MLA's K/V up-projection kv_lora·h·(nope + v) (0 without MLA)."""
        a = self.mla
        return 0 if a is None else a.kv_lora_rank * self.n_heads * (a.qk_nope_head_dim + a.v_head_dim)

    @property
    def attn_params_per_layer(self) -> int:
        """d·(h + 2·kv)·hd (q, k, v) + h·hd·d (o); MLA: module docstring."""
        d = self.d_model
        a = self.mla
        if a is None:
            return d * (self.q_dim + 2 * self.kv_dim) + self.q_dim * d
        q = d * a.q_lora_rank + a.q_lora_rank * self.q_dim if a.q_lora_rank else d * self.q_dim
        return q + d * (a.kv_lora_rank + a.qk_rope_head_dim) + self.mla_kv_up_params + self.o_dim * d

    @property
    def norm_params_per_layer(self) -> int:
        a = self.mla
        return 2 * self.d_model + (0 if a is None else (a.q_lora_rank or 0) + a.kv_lora_rank)

    @property
    def dense_ffn_params(self) -> int:
        """A dense layer's FFN: 3·d·d_ff gated, 2·d·d_ff plain."""
        return (3 if self.ffn_type == "gated" else 2) * self.d_model * self.d_ff

    @property
    def expert_params(self) -> int:
        """One expert's FFN: 3·d·moe_d_ff gated, 2·d·moe_d_ff plain (a dense model: its FFN)."""
        return (3 if self.ffn_type == "gated" else 2) * self.d_model * self.expert_d_ff

    @property
    def router_params(self) -> int:
        return self.d_model * self.n_experts if self.n_experts > 1 else 0

    @property
    def moe_ffn_params(self) -> int:
        """A MoE layer's FFN: (routed + shared experts) · expert + router."""
        return (self.n_experts + self.n_shared_experts) * self.expert_params + self.router_params

    @property
    def ffn_params_per_layer(self) -> float:
        """Mean FFN parameters per layer (dense and MoE layers averaged)."""
        return (self.n_dense_layers * self.dense_ffn_params + self.n_moe_layers * self.moe_ffn_params) / self.n_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """Total parameters (embeddings and untied LM head included; MTP modules not)."""
        head = 0 if self.tied_embeddings else self.lm_head_params
        layers = (self.n_layers * (self.attn_params_per_layer + self.norm_params_per_layer)
                  + self.n_dense_layers * self.dense_ffn_params + self.n_moe_layers * self.moe_ffn_params)
        return layers + self.embedding_params + head + self.d_model

    @property
    def active_params_per_token(self) -> int:
        """Parameters one token multiplies through (MoE: its k experts, the shared ones and the
        router; no embedding gather, no norms)."""
        moe = (self.experts_per_token + self.n_shared_experts) * self.expert_params + self.router_params
        return (self.n_layers * self.attn_params_per_layer + self.n_dense_layers * self.dense_ffn_params
                + self.n_moe_layers * moe + self.lm_head_params)

    @property
    def mtp_params(self) -> int:
        """One MTP module (DeepSeek-V3): a decoder layer of the last layer's kind plus the 2d×d
        projection of [embedding; hidden] and two norms; embedding and LM head shared with the model."""
        ffn = self.moe_ffn_params if self.n_moe_layers else self.dense_ffn_params
        return self.attn_params_per_layer + self.norm_params_per_layer + ffn + 2 * self.d_model ** 2 + 2 * self.d_model

    def mtp_module(self) -> "Model":
        """The MTP module as a one-layer model to price a draft pass (DeepSeek-V3 §2.2): one decoder
        layer of the last layer's kind (MoE when the model has MoE layers), the shared embedding and
        LM head; its 2d×d projection of [embedding; hidden] is priced beside it
        (:func:`costmodel.engine.ops.mtp_projection_op`)."""
        import dataclasses
        return dataclasses.replace(self, id=f"{self.id}-mtp", name=f"{self.name} MTP module", n_layers=1,
                                   first_dense_layers=0, global_layer_every=0, mtp_layers=0,
                                   attention_window=None if self.n_global_layers else self.attention_window,
                                   published_params=None, published_active_params=None)

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """KV of one token over all layers (a context within every window):
        2·layers·kv_heads·head_dim·bytes, MLA layers·(kv_lora + rope)·bytes."""
        if self.mla is not None:
            return float(self.n_layers * self.kv_elements_per_token_layer) * kv_bytes_per_element
        return 2.0 * self.n_layers * self.kv_dim * kv_bytes_per_element

    def kv_bytes_per_sequence(self, context_tokens: float, kv_bytes_per_element: float) -> float:
        """KV of one sequence of ``context_tokens``: global layers hold every token, windowed layers at
        most ``attention_window``: per-layer bytes · (global·L + windowed·min(L, W))."""
        per_layer = self.kv_elements_per_token_layer * kv_bytes_per_element
        w = context_tokens if self.attention_window is None else min(context_tokens, self.attention_window)
        return per_layer * (self.n_global_layers * context_tokens + self.n_window_layers * w)


#: the dimensions a :class:`ModelStack` holds as arrays (the engine computes with them)
STACKED_DIMS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size", "max_context")


@dataclass(frozen=True, eq=False)
class ModelStack(Model):
    """Several models as one :class:`Model` whose dimensions (:data:`STACKED_DIMS`) are int64 arrays
    along one axis of a sweep's grid (``shape``: 1 everywhere but that axis): every formula reads
    them as it reads one model's, so a pass is priced for all members in one array evaluation,
    element for element the same operations as for each member alone (integer products exact, then
    the same float64 operations). Built by :func:`stack_models` from members of one
    :func:`model_signature` (dense, no window, no MLA: every branch the engine takes on a model
    the same for each)."""

    members: tuple = ()
    shape: tuple = ()

    __hash__ = object.__hash__            # identity: its arrays are not hashable
    __eq__ = object.__eq__

    @property
    def n_moe_layers(self) -> int:
        return 0                          # dense members (model_signature)

    @property
    def router_params(self) -> int:
        return 0


def model_signature(m: Model):
    """What the engine decides on (rather than computes with) about a model: its attention and FFN
    kinds, its embeddings, whether its KV heads are its query heads (a grouped-query kernel's extra
    reads are a branch), and whether it declares a max_context. None for a model that does not stack
    (MLA, mixture of experts or expert figures of its own, windowed attention, MTP modules); models
    with one signature may share a sweep block (:class:`ModelStack`)."""
    if type(m) is not Model or m.mla is not None or m.n_experts != 1 or m.attention_window is not None or \
            m.mtp_layers or m.moe_d_ff is not None or m.n_shared_experts:
        return None                       # (the expert figures a dense model carries: its own FFN)
    return (m.ffn_type, m.tied_embeddings, m.experts_per_token, m.n_kv_heads == m.n_heads, m.max_context is None)


def stack_models(members, shape) -> ModelStack:
    """Members (one :func:`model_signature`) as one :class:`ModelStack`, dimensions of ``shape``."""
    import dataclasses
    members = tuple(members)
    first = members[0]
    fields = {f.name: getattr(first, f.name) for f in dataclasses.fields(Model)}
    for name in STACKED_DIMS:
        if fields[name] is not None:
            fields[name] = np.asarray([getattr(m, name) for m in members], dtype=np.int64).reshape(shape)
    fields.update(id=",".join(m.id for m in members), name=",".join(m.name for m in members), source="",
                  published_params=None, published_active_params=None)
    return ModelStack(**fields, members=members, shape=tuple(shape))


MODEL_FIELDS = ("id", "name", "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                "ffn_type", "vocab_size", "tied_embeddings", "n_experts", "experts_per_token",
                "published_params", "published_params_rounding", "published_params_scope", "published_active_params", "source", "max_context", "max_context_source",
                "mtp_layers", "moe", "mla", "attention", "native_weight_format", "notes", "provenance")
MOE_FIELDS = ("moe_d_ff", "n_shared_experts", "first_dense_layers", "layer_freq", "n_group", "topk_group",
              "routed_scaling_factor", "scoring_func", "note")
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
ATTENTION_FIELDS = ("window", "window_kind", "global_layer_every", "note", "attention_sinks", "attention_bias",
                    "qk_norm", "attn_logit_softcapping", "final_logit_softcapping")


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
    i = dict(required=True, integer=True, min_value=1, max_value=1 << 24)
    opt = dict(required=False, integer=True, min_value=1, max_value=1 << 24)
    kw = {}
    moe = f.sub("moe", required=False)
    if moe is not None:
        moe.check_keys(MOE_FIELDS)
        kw.update(moe_d_ff=moe.num("moe_d_ff", **opt),
                  n_shared_experts=moe.num("n_shared_experts", required=False, default=0, integer=True, min_value=0),
                  first_dense_layers=moe.num("first_dense_layers", required=False, default=0, integer=True,
                                             min_value=0),
                  moe_layer_freq=moe.num("layer_freq", required=False, default=1, integer=True, min_value=1))
    mla = f.sub("mla", required=False)
    if mla is not None:
        mla.check_keys(MLA_FIELDS)
        kw["mla"] = MLA(kv_lora_rank=mla.num("kv_lora_rank", **i),
                        q_lora_rank=mla.num("q_lora_rank", allow_null=True, **opt),
                        qk_rope_head_dim=mla.num("qk_rope_head_dim", **i),
                        qk_nope_head_dim=mla.num("qk_nope_head_dim", **i), v_head_dim=mla.num("v_head_dim", **i))
    att = f.sub("attention", required=False)
    if att is not None:
        att.check_keys(ATTENTION_FIELDS)
        kw.update(attention_window=att.num("window", allow_null=True, **opt),
                  window_kind=att.text("window_kind", required=False, default="sliding", choices=WINDOW_KINDS),
                  global_layer_every=att.num("global_layer_every", required=False, default=0, integer=True,
                                             min_value=0))
    m = Model(
        id=f.text("id"), name=f.text("name"), n_layers=_dim(f, "n_layers"), d_model=_dim(f, "d_model"),
        n_heads=_dim(f, "n_heads"), n_kv_heads=_dim(f, "n_kv_heads"), head_dim=_dim(f, "head_dim"),
        d_ff=_dim(f, "d_ff"), vocab_size=_dim(f, "vocab_size"),
        ffn_type=f.text("ffn_type", required=False, default="gated", choices=("gated", "plain")),
        tied_embeddings=f.flag("tied_embeddings", required=False, default=False),
        n_experts=_dim(f, "n_experts", required=False, default=1),
        experts_per_token=_dim(f, "experts_per_token", required=False, default=1),
        published_params=f.num("published_params", required=False, min_value=0, max_value=1e16),
        published_active_params=f.num("published_active_params", required=False, min_value=0, max_value=1e16),
        published_params_rounding=f.num("published_params_rounding", required=False, default=0.0, min_value=0),
        published_params_scope=f.text("published_params_scope", required=False, default="text",
                                      choices=("text", "text+vision")),
        source=f.text("source", required=False, default=""),
        max_context=f.num("max_context", **i),
        mtp_layers=f.num("mtp_layers", required=False, default=0, integer=True, min_value=0),
        **kw)
    f.text("max_context_source", required=False)
    _check(m, src)
    return m


def _check(m: Model, src: str) -> None:
    if m.n_heads % m.n_kv_heads:
        raise InputError(f"n_heads ({m.n_heads}) must be a multiple of n_kv_heads", source=src,
                         field="n_kv_heads", value=m.n_kv_heads)
    if m.experts_per_token > m.n_experts:
        raise InputError(f"experts_per_token must be <= n_experts ({m.n_experts})", source=src,
                         field="experts_per_token", value=m.experts_per_token)
    if m.first_dense_layers >= m.n_layers:
        raise InputError(f"first_dense_layers must be < n_layers ({m.n_layers})", source=src,
                         field="moe.first_dense_layers", value=m.first_dense_layers)
    if m.global_layer_every > m.n_layers:
        raise InputError(f"global_layer_every must be <= n_layers ({m.n_layers})", source=src,
                         field="attention.global_layer_every", value=m.global_layer_every)




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
    from costmodel.inputs.hf_config import from_hf_config, is_hf_config
    data = read_json(path) if path.endswith(".json") else load_yaml(path)
    if path.endswith(".json") or is_hf_config(data):
        return from_hf_config(data, path)
    return _from_zoo_yaml(data, path)


def load_model(id_or_path, field: str = "model") -> Model:
    """Zoo id (case-insensitive), model YAML, or Hugging Face config.json -> :class:`Model`."""
    if isinstance(id_or_path, Model):
        return id_or_path
    return _load_path(str(resolve("model_specs", id_or_path, field)))


def from_hf_config(data, src: str) -> Model:
    """Parse a Hugging Face ``config.json`` (see :mod:`costmodel.inputs.hf_config`)."""
    from costmodel.inputs import hf_config
    return hf_config.from_hf_config(data, src)
