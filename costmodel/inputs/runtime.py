"""How the software stack runs the model: per-kernel host cost, CUDA graphs, per-step overhead.

Profiles live in ``runtimes/<id>.yaml``; every value carries its source (a citation, or 'prior'
until ``costmodel validate --fit`` fits it). Efficiencies here multiply the hardware's achievable ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from costmodel.errors import InputError
from costmodel.inputs.specs import Fields, load_yaml, resolve

DEFAULT_RUNTIME = "compiled"
NUMERIC = ("kernels_per_layer", "kernels_per_pass", "host_per_kernel_s", "step_overhead_s",
           "bandwidth_efficiency", "compute_efficiency", "memory_overhead_bytes")


@dataclass(frozen=True)
class Runtime:
    id: str
    name: str
    uses_cuda_graphs: bool
    fused_attention: bool
    kernels_per_layer: float
    kernels_per_pass: float
    host_per_kernel_s: float
    step_overhead_s: float
    bandwidth_efficiency: float
    compute_efficiency: float
    memory_overhead_bytes: float
    prefill_chunk_tokens: float | None = None   # chunked prefill: tokens per prefill pass (None = one pass)
    #: the stack prefills one prompt at a time (B passes of P tokens) instead of the batch's B·P
    #: tokens in one pass; a pass then holds one sequence's activations
    prefill_per_sequence: bool = False
    #: how its attention kernels read a grouped-query (GQA) KV head shared by n_heads/n_kv_heads query
    #: heads (``GQA_ATTENTION``): ``grouped`` reads it once (FlashAttention, XQA, paged attention);
    #: ``per_query_head`` once per query head (masked MHA kernels before XQA: the re-reads hit L2 as far
    #: as it holds them); ``repeat_kv`` copies K/V to one head per query head before attending (HF
    #: transformers' repeat_kv: the copies are written, then read back)
    gqa_attention: str = "grouped"
    #: vector FLOPs per weight its weight-only int4 / int8 GEMM kernels spend dequantising (ops.gemm)
    dequant_flops_per_weight_int4: float = 0.0
    dequant_flops_per_weight_int8: float = 0.0
    #: host seconds per speculative or tree step beyond its forward passes: building the candidates and
    #: the tree mask, judging them (acceptance with a device-to-host sync) and compacting the KV cache;
    #: the sync keeps it from overlapping the device work, so it adds to the step (0 when not given)
    spec_step_overhead_s: float = 0.0
    #: per speculation method (``SPEC_METHODS``: the draft kind that proposes the tokens), the host
    #: operations its step issues beyond its forward passes (candidate construction, acceptance, KV
    #: compaction: each a dispatched kernel priced at ``host_per_kernel_s``) and the device-to-host
    #: syncs among them (each a launch plus a host-link round trip: the host waits for the device);
    #: counted from the methods' public code, not fitted. Empty = none (fused/compiled stacks)
    spec_step_host_ops: tuple = ()      # ((method, ops), ...)
    spec_step_syncs: tuple = ()         # ((method, syncs), ...)
    #: bytes per second one SM's share of the runtime's memory-bound kernels can pull: a kernel keeps a
    #: bounded number of bytes in flight per SM (its occupancy × loads per thread), and by Little's law
    #: in-flight bytes / DRAM latency caps what each SM streams (Exec.hbm_bytes_per_s); None = no cap
    sm_bandwidth_bytes_per_s: float | None = None
    #: how the stack stores weight-only quantised weights (costmodel/dtypes.py): weights per scale group
    #: (None = per output channel) and scale (+ zero point) bytes per group, per quantised dtype
    int4_group_size: int | None = 128
    int4_scale_bytes_per_group: float = 4.0
    int8_group_size: int | None = None
    int8_scale_bytes_per_group: float = 0.0
    #: whether the token embedding / the LM head are quantised too (else kept in fp16/bf16)
    quantize_embedding: bool = True
    quantize_lm_head: bool = True
    #: storage bytes per weight of a quantised LM head when the stack gives it its own format
    #: (llama.cpp: Q6_K output.weight in Q4_0 files); None = the body's format
    lm_head_bytes_per_weight_int4: float | None = None
    lm_head_bytes_per_weight_int8: float | None = None
    sources: tuple = ()

    def spec_host_ops(self, method: str) -> float:
        return dict(self.spec_step_host_ops).get(method, 0.0)

    def spec_syncs(self, method: str) -> float:
        return dict(self.spec_step_syncs).get(method, 0.0)

    def group_size(self, dtype: str) -> int | None:
        return getattr(self, f"{dtype}_group_size")

    def scale_bytes_per_group(self, dtype: str) -> float:
        return getattr(self, f"{dtype}_scale_bytes_per_group")

    def lm_head_bytes_per_weight(self, dtype: str) -> float | None:
        """The LM head's own format for ``dtype`` (None: the body's format, as for nvfp4/mxfp4)."""
        return getattr(self, f"lm_head_bytes_per_weight_{dtype}", None)


#: physical upper bounds of the required numbers (lower bound 0; an efficiency at least 0.01, since
#: 0 would divide by zero): beyond these a value is a unit mistake, and the engine's products of
#: them stay finite
MAX_VALUE = {"kernels_per_layer": 1e4, "kernels_per_pass": 1e5, "host_per_kernel_s": 1.0, "step_overhead_s": 10.0,
             "bandwidth_efficiency": 1.0, "compute_efficiency": 1.0, "memory_overhead_bytes": 1e15}
OPTIONAL = ("dequant_flops_per_weight_int4", "dequant_flops_per_weight_int8", "sm_bandwidth_bytes_per_s",
            "spec_step_overhead_s", "int4_group_size", "int8_group_size", "int4_scale_bytes_per_group",
            "int8_scale_bytes_per_group", "lm_head_bytes_per_weight_int4", "lm_head_bytes_per_weight_int8",
            "quantize_embedding", "quantize_lm_head", "prefill_chunk_tokens", "spec_step_host_ops", "spec_step_syncs",
            "prefill_per_sequence", "gqa_attention")
GQA_ATTENTION = ("grouped", "per_query_head", "repeat_kv")
KEYS = ("id", "name", "uses_cuda_graphs", "fused_attention") + NUMERIC + OPTIONAL


def parse_runtime(data, src: str) -> Runtime:
    """Validate one runtime mapping: unknown keys refused, each parameter a ``{value, source}`` pair
    with its value in range."""
    f = Fields(data, src)
    f.check_keys(KEYS)
    for k in NUMERIC + OPTIONAL:
        if isinstance(f.data.get(k), dict):
            f.sub(k).check_keys(("value", "source"))
    vals, sources = {}, []
    for k in NUMERIC:
        s = f.sub(k)
        # efficiencies are fractions of the hardware's achievable rates: (0, 1] (0 would divide by
        # zero; above 1 the model would beat the datasheet); overheads are >= 0 and below MAX_VALUE
        vals[k] = s.num("value", min_value=0.01 if "efficiency" in k else 0, max_value=MAX_VALUE[k])
        sources.append((k, s.text("source")))
    for k in ("dequant_flops_per_weight_int4", "dequant_flops_per_weight_int8"):
        s = f.sub(k, required=False)
        if s is not None:
            vals[k] = s.num("value", min_value=0, max_value=1e3)
            sources.append((k, s.text("source")))
    s = f.sub("sm_bandwidth_bytes_per_s", required=False)
    if s is not None:                   # 0.1 GB/s .. 1 TB/s per SM
        vals["sm_bandwidth_bytes_per_s"] = s.num("value", min_value=1e8, max_value=1e12)
        sources.append(("sm_bandwidth_bytes_per_s", s.text("source")))
    s = f.sub("spec_step_overhead_s", required=False)
    if s is not None:                   # seconds: a second per step would be a unit mistake
        vals["spec_step_overhead_s"] = s.num("value", min_value=0, max_value=1.0)
        sources.append(("spec_step_overhead_s", s.text("source")))
    for k in ("spec_step_host_ops", "spec_step_syncs"):
        s = f.sub(k, required=False)
        if s is not None:
            vals[k] = _per_method(s)
            sources.append((k, s.text("source")))
    for dt in ("int4", "int8"):
        s = f.sub(f"{dt}_group_size", required=False)
        if s is not None:
            vals[f"{dt}_group_size"] = _group_size(s)
            sources.append((f"{dt}_group_size", s.text("source")))
        s = f.sub(f"{dt}_scale_bytes_per_group", required=False)
        if s is not None:     # fp32 scale + fp32 zero = 8 bytes is the most a real format stores
            vals[f"{dt}_scale_bytes_per_group"] = s.num("value", min_value=0, max_value=16)
            sources.append((f"{dt}_scale_bytes_per_group", s.text("source")))
        s = f.sub(f"lm_head_bytes_per_weight_{dt}", required=False)
        if s is not None:     # from 2-bit quants up to an fp32 head
            vals[f"lm_head_bytes_per_weight_{dt}"] = s.num("value", min_value=0.125, max_value=4)
            sources.append((f"lm_head_bytes_per_weight_{dt}", s.text("source")))
    s = f.sub("gqa_attention", required=False)
    if s is not None:
        v = s.data.get("value")
        if v not in GQA_ATTENTION:
            raise InputError(f"unknown GQA attention kernel {v!r}", source=s.source, field=f"{s.prefix}.value",
                             allowed=", ".join(GQA_ATTENTION))
        vals["gqa_attention"] = v
        sources.append(("gqa_attention", s.text("source")))
    for k in ("quantize_embedding", "quantize_lm_head", "prefill_per_sequence"):
        s = f.sub(k, required=False)
        if s is not None:
            vals[k] = s.flag("value")
            sources.append((k, s.text("source")))
    chunk = f.sub("prefill_chunk_tokens", required=False)
    if chunk is not None:
        vals["prefill_chunk_tokens"] = chunk.num("value", min_value=1, max_value=1 << 24, allow_null=True,
                                                 required=False)
        sources.append(("prefill_chunk_tokens", chunk.text("source")))
    return Runtime(id=f.text("id"), name=f.text("name"), uses_cuda_graphs=f.flag("uses_cuda_graphs"),
                   fused_attention=f.flag("fused_attention"), sources=tuple(sources), **vals)


#: speculation methods a runtime can give per-step host work for: the draft kind of the record
#: (``model`` = a separate draft model)
SPEC_METHODS = ("medusa", "eagle", "model", "none", "self")


def _per_method(s: Fields) -> tuple:
    """``value``: {method: count >= 0} for methods in ``SPEC_METHODS``, as sorted (method, count) pairs."""
    v = s.data.get("value")
    if not isinstance(v, dict):
        raise InputError("must be a mapping of speculation method to a count", source=s.source,
                         field=f"{s.prefix}.value", allowed=", ".join(SPEC_METHODS))
    out = []
    for k, n in v.items():
        if k not in SPEC_METHODS:
            raise InputError(f"unknown speculation method {k!r}", source=s.source, field=f"{s.prefix}.value.{k}",
                             allowed=", ".join(SPEC_METHODS))
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not (0 <= n <= 1e5):
            raise InputError(f"must be a count, got {n!r}", source=s.source, field=f"{s.prefix}.value.{k}",
                             allowed="a number in [0, 100000]")
        out.append((str(k), float(n)))
    return tuple(sorted(out))


def _group_size(s: Fields) -> int | None:
    """``value``: weights per scale group (an integer >= 1) or ``channel`` (one scale per output row)."""
    v = s.data.get("value")
    if v == "channel":
        return None
    if isinstance(v, str):
        raise InputError(f"must be a whole number of weights or 'channel', got text {v!r}", source=s.source,
                         field=f"{s.prefix}.value", allowed="an integer >= 1, or channel")
    return s.num("value", integer=True, min_value=1, max_value=1 << 20)


@functools.lru_cache(maxsize=64)
def _load_path(path: str) -> Runtime:
    return parse_runtime(load_yaml(path), path)


def load_runtime(id_or_path=None, field: str = "runtime") -> Runtime:
    """Runtime id (``eager``, ``compiled``, ``vllm``, ``trt-llm``, ``llama.cpp``, ``mlc``) or a YAML path."""
    if isinstance(id_or_path, Runtime):
        return id_or_path
    return _load_path(str(resolve("runtimes", id_or_path or DEFAULT_RUNTIME, field)))
