"""How the software stack runs the model: per-kernel host cost, CUDA graphs, per-step overhead.

Profiles live in ``runtimes/<id>.yaml``; every value carries its source (a citation, or 'prior'
until ``costmodel validate --fit`` fits it). Efficiencies here multiply the hardware's achievable ones.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

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
    #: query heads per KV head (on a device) for which its ``grouped`` generation kernel exists; other
    #: GQA group sizes fall back to the ``per_query_head`` kernel (TensorRT-LLM 0.7 to 0.9: XQA only for
    #: 8 query heads per KV head, masked MHA otherwise). () = every group size
    gqa_grouped_group_sizes: tuple = ()
    #: whether its MoE GEMMs multiply an fp8 engine's experts (routed and shared) on the fp8 units;
    #: False: the 1-byte expert weights are dequantised to fp16 inside the grouped GEMM (weight-only,
    #: fp16 matrix rate) while the other matrices run fp8 (Exec.experts_weight_only)
    fp8_moe_experts: bool = True
    #: whether its MoE grouped GEMMs are Ampere (sm80) kernels on every newer GPU too: warp-level
    #: ``mma.sync`` tensor-core instructions, which on a GPU whose full matrix rate needs a newer
    #: instruction (Hopper's ``wgmma``) reach only ``Hardware.mma_sync_matrix_fraction`` of the dense
    #: peak (Exec.expert_matrix_flops_per_s)
    moe_gemm_mma_sync: bool = False
    #: whether its attention kernels multiply an fp8 engine's Q·K and P·V on the fp8 units (with an fp8
    #: KV cache: over any other cache attention is fp16 whatever this says); False: the
    #: context (and generation) attention of an fp8 engine runs in fp16 on the fp16 units, at the fp16
    #: matrix rate, while the GEMMs run fp8 (Exec.attention_matrix_flops_per_s). The default True is the
    #: model's assumption from before engine versions (attention at the pass's compute rate), not a
    #: sourced fact about any engine: only TensorRT-LLM 0.5-0.9 set it, from their release notes; other
    #: runtimes' fp8 attention (vLLM, SGLang, eager) is unverified
    fp8_context_fmha: bool = True
    #: the tensor-parallel all-reduce a record's ``allreduce_algorithm=auto`` gets (``TP_ALLREDUCE``):
    #: ``auto`` NCCL's tuner (the faster of ring and tree per message); ``custom`` the runtime's own
    #: peer-to-peer kernel where it applies (vLLM's custom all-reduce, engine.parallel.custom_allreduce_s)
    tp_allreduce: str = "auto"
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
    #: kernels per layer of the attention a token-tree verification pass runs in the runtime's research
    #: code, which computes attention unfused over the tree mask (QKᵀ, scale, mask add, fp32 softmax,
    #: cast, PV, output transpose copy) instead of the one fused kernel its plain decoding launches:
    #: the extra launches and the materialised q × (L + q) scores
    #: (costmodel.engine.strategies.tree.unfused_tree_attention_op); None = the fused kernel
    tree_attention_kernels_per_layer: float | None = None
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
    #: the device memory the engine gives its KV pool (serving): ``kv_pool_fraction`` f of ``total``
    #: memory, less weights, activations and overhead (vLLM ``gpu_memory_utilization``), or of the
    #: ``free`` memory left after them (TensorRT-LLM ``free_gpu_memory_fraction``); None: all of it
    #: (:meth:`costmodel.serving.stepcost.StepCosts.kv_capacity_tokens`)
    kv_pool_fraction: float | None = None
    kv_pool_basis: str = "total"
    #: how the target scores a chain's γ+1 tokens per sequence (``SPEC_SCORERS``): ``multi_query``, one
    #: sequence of γ+1 queries reading its KV once; ``batch_expansion``, γ+1 single-query sequences each
    #: reading its own context (:func:`costmodel.engine.strategies.common.chain_verify_shape`)
    spec_scorer: str = "multi_query"
    #: engine version the profile describes (``runtime=vllm@0.6``; None: a profile without versions)
    version: str | None = None
    #: host seconds of one scheduler invocation that the device waits for (scheduling, input
    #: preparation, output processing not overlapped with the pass); multi-step scheduling runs it once
    #: per ``num_scheduler_steps`` decode steps. 0 for the current engines (their residue is in
    #: ``step_overhead_s``)
    host_step_s: float = 0.0
    #: host seconds per running sequence per step that the device waits for (per-sequence output
    #: processing on the critical path)
    host_per_seq_s: float = 0.0
    #: host seconds per step per worker rank beyond the first: an engine that runs one worker process
    #: per device hands every step's schedule to each of them (vLLM's multiprocess executor: a
    #: shared-memory broadcast, and every rank prepares its inputs and samples) and the step waits for
    #: the last one, so the per-step host work grows with the ranks (``step_host_s``; 0 when not given)
    step_overhead_per_rank_s: float = 0.0
    #: the engine's scheduler defaults (``SCHEDULER_KEYS``) as sorted (key, value) pairs; the serving
    #: layer uses them for the workload fields not given. ``max_num_batched_tokens`` may be
    #: ``max_model_len`` (the model's context, at least 2048: vLLM V0 without chunked prefill)
    scheduler: tuple = ()
    sources: tuple = ()

    def scheduler_default(self, key: str, fallback=None):
        return dict(self.scheduler).get(key, fallback)

    def host_s(self, seqs=1.0, steps_per_schedule=None):
        """Host seconds a step waits for: host_step_s / N + host_per_seq_s · seqs, N the scheduler
        steps per invocation (the version's default when not given)."""
        n = steps_per_schedule or self.scheduler_default("num_scheduler_steps", 1)
        return self.host_step_s / n + self.host_per_seq_s * seqs

    def step_host_s(self, ranks=1):
        """Host seconds every step waits for besides the engine version's (``host_s``):
        step_overhead_s + step_overhead_per_rank_s · (ranks − 1), ranks the worker processes of one
        instance (its devices: tensor × attention-data × pipeline parallel)."""
        per_rank = self.step_overhead_per_rank_s       # an array while calibration evaluates many values
        if np.ndim(per_rank) == 0 and not per_rank:
            return self.step_overhead_s
        return self.step_overhead_s + per_rank * (np.asarray(ranks, dtype=float) - 1.0)

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
            "prefill_per_sequence", "gqa_attention", "gqa_grouped_group_sizes", "fp8_moe_experts", "moe_gemm_mma_sync",
            "fp8_context_fmha", "tp_allreduce", "spec_scorer", "kv_pool_fraction", "kv_pool_basis", "step_overhead_per_rank_s",
            "tree_attention_kernels_per_layer")
GQA_ATTENTION = ("grouped", "per_query_head", "repeat_kv")
TP_ALLREDUCE = ("auto", "custom")
SPEC_SCORERS = ("multi_query", "batch_expansion")
KV_POOL_BASES = ("total", "free")
KEYS = ("id", "name", "uses_cuda_graphs", "fused_attention") + NUMERIC + OPTIONAL + ("default_version", "versions")
#: scheduler defaults a version may give (the serving workload fields of the same names)
SCHEDULER_KEYS = ("max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "num_scheduler_steps")
VERSION_KEYS = ("name", "source", "host_step_s", "host_per_seq_s", "scheduler", "prefill_chunk_tokens",
                "gqa_attention", "gqa_grouped_group_sizes", "fp8_moe_experts", "moe_gemm_mma_sync", "fp8_context_fmha",
                "spec_scorer", "step_overhead_s", "step_overhead_per_rank_s")


def parse_runtime(data, src: str, version: str | None = None) -> Runtime:
    """Validate one runtime mapping: unknown keys refused, each parameter a ``{value, source}`` pair
    with its value in range. With ``versions``, the entry for ``version`` (the newest listed version
    not above it; ``default_version`` when None) is applied on top of the base profile."""
    f = Fields(data, src)
    f.check_keys(KEYS)
    vals_v, sources_v, vname = _version_entry(f, version)
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
        _optional(f, k, vals, sources, lambda s: s.num("value", min_value=0, max_value=1e3))
    # 0.1 GB/s .. 1 TB/s per SM
    _optional(f, "sm_bandwidth_bytes_per_s", vals, sources, lambda s: s.num("value", min_value=1e8, max_value=1e12))
    # seconds: a second per step would be a unit mistake
    _optional(f, "spec_step_overhead_s", vals, sources, lambda s: s.num("value", min_value=0, max_value=1.0))
    # seconds per step per rank: 0.1 s would be a unit mistake
    _optional(f, "step_overhead_per_rank_s", vals, sources, lambda s: s.num("value", min_value=0, max_value=0.1))
    for k in ("spec_step_host_ops", "spec_step_syncs"):
        _optional(f, k, vals, sources, _per_method)
    # at least the one fused kernel it replaces; 100 kernels for one attention would be a mistake
    _optional(f, "tree_attention_kernels_per_layer", vals, sources,
              lambda s: s.num("value", min_value=1, max_value=100))
    for dt in ("int4", "int8"):
        _optional(f, f"{dt}_group_size", vals, sources, _group_size)
        # fp32 scale + fp32 zero = 8 bytes is the most a real format stores
        _optional(f, f"{dt}_scale_bytes_per_group", vals, sources, lambda s: s.num("value", min_value=0, max_value=16))
        # from 2-bit quants up to an fp32 head
        _optional(f, f"lm_head_bytes_per_weight_{dt}", vals, sources,
                  lambda s: s.num("value", min_value=0.125, max_value=4))
    _optional(f, "gqa_attention", vals, sources, _gqa_attention)
    _optional(f, "gqa_grouped_group_sizes", vals, sources, _group_sizes)
    _optional(f, "tp_allreduce", vals, sources, _tp_allreduce)
    _optional(f, "spec_scorer", vals, sources, _spec_scorer)
    # a fraction of device memory: 0 would leave no KV pool
    _optional(f, "kv_pool_fraction", vals, sources, lambda s: s.num("value", min_value=0.01, max_value=1.0))
    _optional(f, "kv_pool_basis", vals, sources, _kv_pool_basis)
    for k in ("quantize_embedding", "quantize_lm_head", "prefill_per_sequence", "fp8_moe_experts", "moe_gemm_mma_sync",
              "fp8_context_fmha"):
        _optional(f, k, vals, sources, _flag)
    _optional(f, "prefill_chunk_tokens", vals, sources,
              lambda s: s.num("value", min_value=1, max_value=1 << 24, allow_null=True, required=False))
    vals.update(vals_v)
    sources += sources_v
    return Runtime(id=f.text("id"), name=f.text("name"), uses_cuda_graphs=f.flag("uses_cuda_graphs"),
                   fused_attention=f.flag("fused_attention"), sources=tuple(sources), version=vname, **vals)


def _optional(f: Fields, key: str, vals: dict, sources: list, read) -> None:
    """An optional ``{value, source}`` parameter, when given: ``vals[key] = read(its fields)`` and its
    source."""
    s = f.sub(key, required=False)
    if s is not None:
        vals[key] = read(s)
        sources.append((key, s.text("source")))


def _choice(allowed: tuple, what: str):
    """A reader of a ``value`` that must be one of ``allowed`` (an InputError naming ``what`` otherwise)."""
    def read(s: Fields) -> str:
        v = s.data.get("value")
        if v not in allowed:
            raise InputError(f"unknown {what} {v!r}", source=s.source, field=f"{s.prefix}.value",
                             allowed=", ".join(allowed))
        return v
    return read


def _flag(s: Fields) -> bool:
    """A ``value`` that is true or false."""
    return s.flag("value")


_gqa_attention = _choice(GQA_ATTENTION, "GQA attention kernel")
_tp_allreduce = _choice(TP_ALLREDUCE, "tensor-parallel all-reduce")
_spec_scorer = _choice(SPEC_SCORERS, "speculative scorer")
_kv_pool_basis = _choice(KV_POOL_BASES, "KV-pool memory basis")


def _group_sizes(s: Fields) -> tuple:
    """A ``value`` that is a list of query-heads-per-KV-head counts (integers 1..65536)."""
    v = s.data.get("value")
    if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= 1 << 16
                                               for x in v):
        raise InputError(f"must be a list of query heads per KV head, got {str(v)[:40]!r}", source=s.source,
                         field=f"{s.prefix}.value", allowed="a non-empty list of integers 1..65536, e.g. [8]")
    return tuple(sorted(set(v)))


def _version_key(text: str, source: str, field: str) -> tuple:
    """``0.6.3`` -> (0, 6, 3)."""
    try:
        key = tuple(int(p) for p in str(text).strip().split("."))
    except ValueError:
        key = ()
    if not key or any(p < 0 for p in key):
        raise InputError(f"not a version number: {str(text)[:40]!r}", source=source, field=field,
                         allowed="dotted numbers, e.g. 0.6 or 0.6.3")
    return key


def _version_entry(f: Fields, version: str | None):
    """(values, sources, version name) of the ``versions`` entry that ``version`` selects: the newest
    listed version <= the requested one (``vllm@0.6.3`` -> 0.6); ``default_version`` when None."""
    versions = f.data.get("versions")
    if versions is None:
        if version is not None:
            raise InputError(f"runtime {f.data.get('id')!r} has no versions (asked for @{version})",
                             source=f.source, field="runtime", allowed="the runtime id without @VERSION")
        return {}, [], None
    if not isinstance(versions, dict) or not versions:
        raise InputError("must be a mapping of version to its entry", source=f.source, field="versions")
    listed = sorted((_version_key(v, f.source, f"versions.{v}"), str(v)) for v in versions)
    if version is None:
        if "default_version" not in f.data:
            raise InputError("a profile with versions names its default_version", source=f.source,
                             field="default_version", allowed=", ".join(v for _, v in listed))
        want = str(f.data["default_version"])
        if want not in {v for _, v in listed}:
            raise InputError(f"default_version {want!r} is not listed", source=f.source, field="default_version",
                             allowed=", ".join(v for _, v in listed))
    else:
        key = _version_key(version, "runtime", "runtime")
        below = [v for k, v in listed if k <= key]
        if not below:
            raise InputError(f"no profile for {f.data.get('id')}@{version}", field="runtime",
                             allowed=", ".join(f"{f.data.get('id')}@{v}" for _, v in listed) + " (or later)")
        want = below[-1]
    e = Fields(versions[want], f.source, prefix=f"versions.{want}")
    e.check_keys(VERSION_KEYS)
    vals, sources = {}, [(f"version {want}", e.text("source"))]
    for k, hi in (("host_step_s", 1.0), ("host_per_seq_s", 0.1), ("step_overhead_per_rank_s", 0.1),
                  ("step_overhead_s", MAX_VALUE["step_overhead_s"])):
        s = e.sub(k, required=False)
        if s is not None:
            s.check_keys(("value", "source"))
            vals[k] = s.num("value", min_value=0, max_value=hi)
            sources.append((k, s.text("source")))
    s = e.sub("prefill_chunk_tokens", required=False)
    if s is not None:
        vals["prefill_chunk_tokens"] = s.num("value", min_value=1, max_value=1 << 24, allow_null=True, required=False)
        sources.append(("prefill_chunk_tokens", s.text("source")))
    s = e.sub("scheduler", required=False)
    if s is not None:
        s.check_keys(("value", "source"))
        vals["scheduler"] = _scheduler(s)
        sources.append(("scheduler", s.text("source")))
    for k, read in (("gqa_attention", _gqa_attention), ("gqa_grouped_group_sizes", _group_sizes),
                    ("fp8_moe_experts", _flag), ("moe_gemm_mma_sync", _flag), ("fp8_context_fmha", _flag),
                    ("spec_scorer", _spec_scorer)):
        s = e.sub(k, required=False)
        if s is not None:
            s.check_keys(("value", "source"))
        _optional(e, k, vals, sources, read)
    return vals, sources, want


@functools.lru_cache(maxsize=64)
def _version_values(path: str, version: str) -> tuple:
    return tuple(sorted(_version_entry(Fields(load_yaml(path), path), version)[0].items()))


def with_version(rt: Runtime, id_with_version) -> Runtime:
    """``rt`` (a profile of the same runtime, e.g. with fitted parameters) with the attributes the
    engine version named in ``id_with_version`` (``trt-llm@0.5``) sets applied on top, as
    :func:`parse_runtime` applies them to the base profile; ``rt`` unchanged without ``@VERSION``.
    ``id_with_version`` may be a versioned :class:`Runtime` itself: the attributes its version entry
    sets are applied with the values it holds (e.g. one switched off for an ablation)."""
    if isinstance(id_with_version, Runtime):    # a versioned profile given whole
        given = id_with_version
        if given.version is None:
            return rt
        path = str(resolve("runtimes", given.id, "runtime"))
        keys = dict(_version_values(path, given.version))
        return dataclasses.replace(rt, version=given.version, **{k: getattr(given, k) for k in keys})
    if not isinstance(id_with_version, str):
        return rt
    base, version = split_version(id_with_version)
    if version is None:
        return rt
    path = str(resolve("runtimes", base, "runtime"))
    vals = dict(_version_values(path, version))
    return dataclasses.replace(rt, version=load_runtime(id_with_version).version, **vals)


def _entries(s: Fields, allowed: tuple, what: str, to: str):
    """(key, value, field name) of each entry of ``value``, a mapping of ``what`` (one of ``allowed``)
    ``to`` something; an unknown key is refused when reached, so errors come in the file's order."""
    v = s.data.get("value")
    if not isinstance(v, dict):
        raise InputError(f"must be a mapping of {what} {to}", source=s.source,
                         field=f"{s.prefix}.value", allowed=", ".join(allowed))
    for k, x in v.items():
        field = f"{s.prefix}.value.{k}"
        if k not in allowed:
            raise InputError(f"unknown {what} {k!r}", source=s.source, field=field, allowed=", ".join(allowed))
        yield k, x, field


def _scheduler(s: Fields) -> tuple:
    """``value``: {scheduler setting: default} for settings in ``SCHEDULER_KEYS``, as sorted pairs."""
    out = []
    for k, x, field in _entries(s, SCHEDULER_KEYS, "scheduler setting", "to its default"):
        if k == "chunked_prefill":
            if not isinstance(x, bool):
                raise InputError(f"must be true or false, got {x!r}", source=s.source, field=field)
        elif k == "max_num_batched_tokens" and x == "max_model_len":
            pass
        elif isinstance(x, bool) or not isinstance(x, int) or not (1 <= x <= (1 << 20)):
            raise InputError(f"must be a whole number in [1, 1048576], got {x!r}", source=s.source, field=field,
                             allowed="max_model_len" if k == "max_num_batched_tokens" else None)
        out.append((str(k), x))
    return tuple(sorted(out))


#: speculation methods a runtime can give per-step host work for: the draft kind of the record
#: (``model`` = a separate draft model)
SPEC_METHODS = ("medusa", "eagle", "model", "none", "self")


def _per_method(s: Fields) -> tuple:
    """``value``: {method: count >= 0} for methods in ``SPEC_METHODS``, as sorted (method, count) pairs."""
    out = []
    for k, n, field in _entries(s, SPEC_METHODS, "speculation method", "to a count"):
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not (0 <= n <= 1e5):
            raise InputError(f"must be a count, got {n!r}", source=s.source, field=field,
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
def _load_path(path: str, version: str | None = None) -> Runtime:
    return parse_runtime(load_yaml(path), path, version)


def split_version(id_or_path) -> tuple:
    """``vllm@0.6`` -> ('vllm', '0.6'); a path or an id without ``@`` -> (it, None)."""
    s = str(id_or_path)
    if "@" in s and "/" not in s and not s.endswith((".yaml", ".yml")):
        base, _, ver = s.partition("@")
        return base, ver.strip() or None
    return id_or_path, None


def load_runtime(id_or_path=None, field: str = "runtime") -> Runtime:
    """Runtime id (``eager``, ``compiled``, ``vllm``, ``trt-llm``, ``llama.cpp``, ``mlc``), optionally
    with an engine version (``vllm@0.6``), or a YAML path."""
    if isinstance(id_or_path, Runtime):
        return id_or_path
    base, version = split_version(id_or_path or DEFAULT_RUNTIME)
    return _load_path(str(resolve("runtimes", base, field)), version)
