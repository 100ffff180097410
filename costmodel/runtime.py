"""How the software stack runs the model: per-kernel host cost, CUDA graphs, per-step overhead.

Profiles live in ``runtimes/<id>.yaml``; every value carries its source (a citation, or 'prior'
until the validation issue fits it). Efficiencies here multiply the hardware's achievable ones.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .specs import Fields, load_yaml, resolve

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
    #: vector FLOPs per weight its weight-only int4 / int8 GEMM kernels spend dequantising (ops.gemm)
    dequant_flops_per_weight_int4: float = 0.0
    dequant_flops_per_weight_int8: float = 0.0
    sources: tuple = ()


def parse_runtime(data, src: str) -> Runtime:
    f = Fields(data, src)
    vals, sources = {}, []
    for k in NUMERIC:
        s = f.sub(k)
        vals[k] = s.num("value", min_value=0.01 if "efficiency" in k else 0,   # 0 would divide by zero
                        max_value=1.5 if "efficiency" in k else None)
        sources.append((k, s.text("source")))
    for k in ("dequant_flops_per_weight_int4", "dequant_flops_per_weight_int8"):
        s = f.sub(k, required=False)
        if s is not None:
            vals[k] = s.num("value", min_value=0)
            sources.append((k, s.text("source")))
    chunk = f.sub("prefill_chunk_tokens", required=False)
    if chunk is not None:
        vals["prefill_chunk_tokens"] = chunk.num("value", min_value=1, allow_null=True, required=False)
        sources.append(("prefill_chunk_tokens", chunk.text("source")))
    return Runtime(id=f.text("id"), name=f.text("name"), uses_cuda_graphs=f.flag("uses_cuda_graphs"),
                   fused_attention=f.flag("fused_attention"), sources=tuple(sources), **vals)


@functools.lru_cache(maxsize=64)
def _load_path(path: str) -> Runtime:
    return parse_runtime(load_yaml(path), path)


def load_runtime(id_or_path=None, field: str = "runtime") -> Runtime:
    """Runtime id (``eager``, ``compiled``, ``vllm``, ``trt-llm``, ``llama.cpp``, ``mlc``) or a YAML path."""
    if isinstance(id_or_path, Runtime):
        return id_or_path
    return _load_path(str(resolve("runtimes", id_or_path or DEFAULT_RUNTIME, field)))
