"""A Hugging Face ``config.json`` -> :class:`costmodel.inputs.model.Model` (offline).

Field names by family (a multimodal config's ``text_config`` is read in place of the top level):

* LLaMA / Mistral / Qwen2 / Qwen3 / Gemma: hidden_size, num_hidden_layers, num_attention_heads,
  num_key_value_heads, head_dim, intermediate_size, vocab_size, max_position_embeddings;
  ``sliding_window`` (Mistral v0.1: every layer; Qwen2 only with ``use_sliding_window``), the local/global
  pattern from ``layer_types`` (gpt-oss, recent Gemma), ``sliding_window_pattern`` (Gemma-3: one global
  layer in 6) or Gemma-2's alternation (every 2nd layer global).
* Mixtral / gpt-oss / Llama-4: num_local_experts, num_experts_per_tok; Llama-4: intermediate_size is the
  expert width, intermediate_size_mlp the dense width, interleave_moe_layer_step, one shared expert,
  attention_chunk_size on the RoPE layers (every ``no_rope_layer_interval``-th layer, default 4, global).
* Qwen3-MoE / Qwen2-MoE: num_experts, moe_intermediate_size, decoder_sparse_step,
  shared_expert_intermediate_size (one shared expert of that width when > 0).
* DeepSeek-V2/V3, Kimi-K2: n_routed_experts, n_shared_experts, moe_intermediate_size,
  first_k_dense_replace, moe_layer_freq, kv_lora_rank, q_lora_rank, qk_rope_head_dim,
  qk_nope_head_dim, v_head_dim, num_nextn_predict_layers (MTP modules).
"""

from __future__ import annotations

from pathlib import Path

from costmodel.errors import InputError
from costmodel.inputs.model import MLA, Model, _check
from costmodel.inputs.specs import Fields


def is_hf_config(data) -> bool:
    return isinstance(data, dict) and ("hidden_size" in data or "text_config" in data)


def _global_every(layer_types, src: str) -> int:
    """k such that layer i is global iff (i + 1) % k == 0, from a list of 'sliding_attention' /
    'full_attention' (0: every layer sliding); an irregular pattern is refused."""
    full = [i for i, t in enumerate(layer_types) if t != "sliding_attention"]
    if not full:
        return 0
    k = full[0] + 1
    if full != [i for i in range(len(layer_types)) if (i + 1) % k == 0]:
        raise InputError("layer_types is not a regular local/global pattern (one global layer every k)",
                         source=src, field="layer_types")
    return k


def from_hf_config(data, src: str) -> Model:
    """A Model from a Hugging Face ``config.json`` mapping (a multimodal config's ``text_config``):
    dimensions, MLA, experts and attention windows, each from the keys the model families use."""
    top = data
    if isinstance(data, dict) and isinstance(data.get("text_config"), dict):
        data = dict(data["text_config"])
        for key in ("tie_word_embeddings", "_name_or_path"):
            if key in top and key not in data:
                data[key] = top[key]
    f = Fields(data, src)
    i = dict(required=True, integer=True, min_value=1)
    opt = dict(required=False, integer=True, min_value=1, allow_null=True)
    mt = str(data.get("model_type", "llama"))
    d = f.num("hidden_size", **i)
    heads = f.num("num_attention_heads", **i)
    kv = f.num("num_key_value_heads", required=False, default=heads, integer=True, min_value=1)
    hd = f.num("head_dim", default=None, **opt)
    n_layers = f.num("num_hidden_layers", **i)
    ff = f.num("intermediate_size", **i)
    kw = {}
    # ---- MLA
    if data.get("kv_lora_rank"):
        kw["mla"] = MLA(kv_lora_rank=f.num("kv_lora_rank", **i), q_lora_rank=f.num("q_lora_rank", **opt),
                        qk_rope_head_dim=f.num("qk_rope_head_dim", **i),
                        qk_nope_head_dim=f.num("qk_nope_head_dim", **i), v_head_dim=f.num("v_head_dim", **i))
        hd = hd or kw["mla"].v_head_dim
        kw["mtp_layers"] = f.num("num_nextn_predict_layers", required=False, default=0, integer=True, min_value=0,
                                 allow_null=True) or 0
    if hd is None:
        if d % heads:
            raise InputError("hidden_size is not divisible by num_attention_heads; give head_dim",
                             source=src, field="head_dim")
        hd = d // heads
    e, k, ff = _hf_experts(f, data, mt, ff, kw, src)
    _hf_windows(f, data, mt, kw, src)
    act = data.get("hidden_act", data.get("hidden_activation", "silu"))
    gated = mt not in ("gpt2", "opt", "gpt_neox", "bloom") and act in (
        "silu", "swiglu", "gelu", "gelu_pytorch_tanh", "geglu")
    name = top.get("_name_or_path") or Path(src).parent.name or Path(src).stem
    m = Model(
        id=str(src), name=str(name), n_layers=n_layers, d_model=d, n_heads=heads, n_kv_heads=kv, head_dim=hd,
        d_ff=ff, vocab_size=f.num("vocab_size", **i), ffn_type="gated" if gated else "plain",
        tied_embeddings=f.flag("tie_word_embeddings", required=False, default=False),
        n_experts=e, experts_per_token=k if e > 1 else 1, source=f"Hugging Face config {src}",
        max_context=f.num("max_position_embeddings", default=None, **opt), **kw)
    _check(m, src)
    return m


def _hf_experts(f: Fields, data: dict, mt: str, ff: int, kw: dict, src: str) -> tuple:
    """(experts, experts per token, dense FFN width) of a config; for a mixture of experts the expert
    width, shared experts, leading dense layers and MoE layer frequency go into ``kw``."""
    opt = dict(required=False, integer=True, min_value=1, allow_null=True)
    e = (f.num("num_local_experts", default=None, **opt) or f.num("n_routed_experts", default=None, **opt)
         or f.num("num_experts", default=None, **opt) or 1)
    k = f.num("num_experts_per_tok", default=1, **opt) or 1
    if e > 1:
        moe_ff = f.num("moe_intermediate_size", default=None, **opt)
        shared = f.num("n_shared_experts", required=False, default=0, integer=True, min_value=0, allow_null=True) or 0
        first_dense = f.num("first_k_dense_replace", required=False, default=0, integer=True, min_value=0,
                            allow_null=True) or 0
        freq = (f.num("moe_layer_freq", default=None, **opt) or f.num("decoder_sparse_step", default=None, **opt)
                or f.num("interleave_moe_layer_step", default=None, **opt) or 1)
        if mt.startswith("llama4"):
            moe_ff, shared = ff, 1
            ff = f.num("intermediate_size_mlp", required=False, default=ff, integer=True, min_value=1)
        if mt.startswith("qwen2_moe") and data.get("shared_expert_intermediate_size"):
            shared = 1     # counted at the expert width (the config's shared width is noted, not modelled)
        if data.get("mlp_only_layers"):
            raise InputError("mlp_only_layers (dense layers between MoE layers) is not modelled", source=src,
                             field="mlp_only_layers", allowed="[] (every layer past first_k_dense_replace is MoE)")
        kw.update(moe_d_ff=moe_ff, n_shared_experts=shared, first_dense_layers=first_dense, moe_layer_freq=freq)
    return e, k, ff


def _hf_windows(f: Fields, data: dict, mt: str, kw: dict, src: str) -> None:
    """Chunked (Llama 4) or sliding-window attention, and how often a layer attends globally, into ``kw``."""
    i = dict(required=True, integer=True, min_value=1)
    window = chunk = None
    every = 0
    if data.get("attention_chunk_size"):
        chunk = f.num("attention_chunk_size", **i)
        nope = data.get("no_rope_layers")
        if isinstance(nope, list) and nope:
            every = _global_every(["sliding_attention" if x else "full_attention" for x in nope], src)
        else:
            every = f.num("no_rope_layer_interval", required=False, default=4, integer=True, min_value=1)
    elif data.get("sliding_window") and (mt != "qwen2" and mt != "qwen3" or data.get("use_sliding_window")):
        window = f.num("sliding_window", **i)
        if isinstance(data.get("layer_types"), list):
            every = _global_every(data["layer_types"], src)
        elif data.get("sliding_window_pattern"):
            every = f.num("sliding_window_pattern", **i)
        elif mt.startswith("gemma2"):
            every = 2
    if chunk is not None:
        kw.update(attention_window=chunk, window_kind="chunked", global_layer_every=every)
    elif window is not None:
        kw.update(attention_window=window, window_kind="sliding", global_layer_every=every)
