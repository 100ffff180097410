"""Exec: a model on hardware under a runtime, with its dtypes and parallel degrees.

What follows from those alone: bytes per weight and per KV element, achievable FLOP/s and
bandwidth, heads per device. The operators of a pass (:mod:`costmodel.engine.ops`) read their
figures from it. A sweep's stacked weight dtypes (:class:`costmodel.inputs.dtypes.WeightDtypes`)
make its dtype figures arrays of the members' own (:meth:`Exec.per_weight_dtype`)."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from costmodel.fast.arrays import broadcast_shape
from costmodel.inputs import dtypes
from costmodel.inputs.hardware import Hardware
from costmodel.inputs.model import Model
from costmodel.inputs.runtime import Runtime


@dataclass(frozen=True)
class Exec:
    """A model on hardware under a runtime with dtypes and tensor/pipeline parallel degrees.

    Immutable; its derived quantities (bytes per element, achievable FLOP/s and bandwidth, …) are
    computed once per instance (``functools.cached_property``)."""

    model: Model
    hw: Hardware
    rt: Runtime
    weight_dtype: str = "fp16"
    kv_dtype: str = "fp16"
    tp: int = 1
    pp: int = 1
    allreduce_algorithm: str = "auto"     # 'auto' (NCCL: the faster per message), 'ring', 'tree' or 'custom' (parallel.allreduce_time_s)
    ep: int = 1                   # expert-parallel degree: routed experts split over ep devices of a stage
    dp: int = 1                   # attention data-parallel groups of tp devices per stage (ep = tp·dp when > 1)

    @property
    def stage_devices(self) -> int:
        """Devices of one pipeline stage: tp·dp (tp without attention data parallelism)."""
        return self.tp * self.dp

    @property
    def quantised(self) -> bool:
        """Weight-only int8/int4: stored in the runtime's quantised format (dtypes module docstring)."""
        if type(self.weight_dtype) is dtypes.WeightDtypes:
            return self.per_weight_dtype(lambda e: e.quantised)
        return self.weight_dtype in dtypes.QUANTISED

    @functools.cached_property
    def dtype_members(self) -> tuple:
        """One Exec per weight dtype of a stacked ``weight_dtype`` (:class:`dtypes.WeightDtypes`), else ()."""
        wd = self.weight_dtype
        if type(wd) is not dtypes.WeightDtypes:
            return ()
        return tuple(dataclasses.replace(self, weight_dtype=m) for m in wd.members)

    def per_weight_dtype(self, fn):
        """``fn(self)``; for a stacked weight dtype, each member Exec's ``fn`` along the dtype axis: one
        value when the members agree (a number, or a text or bool the engine branches on), else an
        array of their values (numbers only: members that differ in a branch are an error)."""
        if not self.dtype_members:
            return fn(self)
        return _along(self.weight_dtype.shape, [fn(e) for e in self.dtype_members])

    def w_bytes_for(self, d_in) -> float:
        """Bytes per weight of a quantised decoder matrix with input dimension ``d_in``: element bytes +
        the runtime's scale bytes per group / group size (group = ``d_in`` for per-channel scales)."""
        if self.dtype_members:             # stacked dtypes: one array per input dimension, kept
            memo = self.__dict__.setdefault("_w_bytes_by_d_in", {})
            key = d_in if isinstance(d_in, (int, float)) else \
                (d_in.dtype.str, d_in.shape, d_in.tobytes()) if isinstance(d_in, np.ndarray) else None
            got = memo.get(key) if key is not None else None
            if got is None:
                got = self.per_weight_dtype(lambda e: e.w_bytes_for(d_in))
                if key is not None:
                    if isinstance(got, np.ndarray):
                        got.flags.writeable = False     # kept: read by every later caller
                    memo[key] = got
            return got
        if not self.quantised:
            return dtypes.BYTES_PER_ELEMENT[dtypes.check(self.weight_dtype, "weight_dtype")]
        wd = self.weight_dtype
        if wd in dtypes.FP4_BLOCK_FORMATS:
            return dtypes.quantised_bytes_per_weight(wd, *dtypes.FP4_BLOCK_FORMATS[wd])
        return dtypes.quantised_bytes_per_weight(wd, self.rt.group_size(wd), self.rt.scale_bytes_per_group(wd), d_in)

    @functools.cached_property
    def w_bytes(self) -> float:
        """Bytes per decoder-layer weight, scales included (per-channel scales taken at d_in = d_model)."""
        if self.dtype_members:
            return self.per_weight_dtype(lambda e: e.w_bytes)
        return self.w_bytes_for(self.model.d_model)

    @functools.cached_property
    def lm_head_w_bytes(self) -> float:
        """Bytes per LM-head weight: the runtime's LM-head format, the activation dtype when the runtime
        leaves the head unquantised (``Runtime.quantize_lm_head``), else the body's format."""
        if self.dtype_members:
            return self.per_weight_dtype(lambda e: e.lm_head_w_bytes)
        if not self.quantised:
            return self.w_bytes
        if not self.rt.quantize_lm_head:
            return self.act_bytes
        own = self.rt.lm_head_bytes_per_weight(self.weight_dtype)
        return self.w_bytes if own is None else float(own)

    @functools.cached_property
    def embedding_w_bytes(self) -> float:
        """Bytes per token-embedding weight; a tied embedding is the LM head's tensor and takes its format."""
        if self.dtype_members:
            return self.per_weight_dtype(lambda e: e.embedding_w_bytes)
        if self.model.tied_embeddings:
            return self.lm_head_w_bytes
        if self.quantised and not self.rt.quantize_embedding:
            return self.act_bytes
        return self.w_bytes

    @functools.cached_property
    def kv_elem_bytes(self) -> float:
        return dtypes.kv_bytes_per_element(self.kv_dtype)

    @functools.cached_property
    def act_bytes(self) -> float:
        if self.dtype_members:
            return self.per_weight_dtype(lambda e: e.act_bytes)
        return dtypes.activation_bytes(self.weight_dtype)

    @functools.cached_property
    def heads_per_device(self) -> float:
        return self.model.n_heads / self.tp

    @functools.cached_property
    def tp_allreduce_link(self):
        """The link of the TP all-reduces, :func:`costmodel.engine.parallel.tp_link` (hw, tp, pp): every
        pass on this instance asks, and for a sweep's devices × device counts it is picked element by
        element (once per devices and counts within a sweep: engine.pass_memo)."""
        from costmodel.engine.parallel import tp_link
        from costmodel.engine.pass_memo import shared_call, value_key
        return shared_call("tp_link", (value_key(self.hw), value_key(self.tp), self.pp),
                           lambda: tp_link(self.hw, self.tp, self.pp))

    @functools.cached_property
    def kv_heads_per_device(self) -> int:
        """KV heads held per device: split across TP, replicated when kv_heads < tp (MLA: the one
        latent, replicated on every TP rank)."""
        if self.model.mla is not None:
            return 1
        if np.ndim(self.tp) or np.ndim(self.model.n_kv_heads):   # a sweep's device counts or models
            return np.ceil(self.model.n_kv_heads / self.tp)
        return math.ceil(self.model.n_kv_heads / self.tp)

    @functools.cached_property
    def kv_bytes_per_token_layer(self) -> float:
        """KV of one token in one layer on one device: 2·kv_heads/dev·head_dim·bytes; MLA
        (kv_lora_rank + qk_rope_head_dim)·bytes on every TP rank (the latent is not split by heads)."""
        if self.model.mla is not None:
            return float(self.model.kv_elements_per_token_layer) * self.kv_elem_bytes
        return 2.0 * self.kv_heads_per_device * self.model.head_dim * self.kv_elem_bytes

    @functools.cached_property
    def dequant_flops_per_weight(self) -> float:
        """Vector-unit FLOPs a weight-only int8/int4 GEMM spends per weight it reads (unpack, convert to
        fp16, apply the group scale/zero); 0 for weights stored in the compute dtype. A property of the
        runtime's kernels: ``Runtime.dequant_flops_per_weight`` (runtimes/*.yaml, with sources)."""
        if self.dtype_members:
            return self.per_weight_dtype(lambda e: e.dequant_flops_per_weight)
        if not dtypes.weight_only(self.weight_dtype, self.hw):
            return 0.0
        # fp8 weight-only: the same one-byte-to-fp16 conversion and scale as int8
        # nvfp4/mxfp4 without fp4 units: 4-bit unpack and block scale, as int4
        fmt = {"fp8": "int8", "nvfp4": "int4", "mxfp4": "int4"}.get(self.weight_dtype, self.weight_dtype)
        return float(getattr(self.rt, f"dequant_flops_per_weight_{fmt}"))

    @functools.cached_property
    def compute_dtype(self) -> str:
        """The matrix units' dtype on this hardware (``dtypes.compute_dtype``)."""
        if self.dtype_members:
            return self.per_weight_dtype(lambda e: e.compute_dtype)
        return dtypes.compute_dtype(self.weight_dtype, self.hw)

    @functools.cached_property
    def matrix_flops_per_s(self) -> float:
        """Achievable matrix FLOP/s: peak(compute dtype) · the hardware's measured large-GEMM fraction
        for that dtype (``Hardware.matrix_efficiency_for``: fp8 GEMMs reach ~0.70 of the fp8 peak on
        an H100 where bf16 reaches ~0.80 of its own) · the runtime's efficiency."""
        return self.matrix_rate_for(self.compute_dtype)

    def matrix_rate_for(self, dtype: str) -> float:
        """peak(dtype) · the hardware's measured GEMM fraction for dtype · the runtime's efficiency (FLOP/s)."""
        return self.hw.matrix_peak(dtype) * self.hw.matrix_efficiency_for(dtype) * self.rt.compute_efficiency

    @functools.cached_property
    def experts_weight_only(self) -> bool:
        """fp8 engine, runtime without fp8 MoE GEMMs (``Runtime.fp8_moe_experts``): the experts keep
        their 1-byte weights but are dequantised to fp16 in the GEMM, as weight-only int8."""
        return self.weight_dtype == "fp8" and not self.rt.fp8_moe_experts and bool(self.model.n_moe_layers)

    @functools.cached_property
    def expert_matrix_flops_per_s(self):
        """The MoE experts' GEMM rate where it is not the pass's (None: ``matrix_flops_per_s``):

        * ``experts_weight_only``: peak(fp16) · the hardware's fp16 GEMM fraction · compute_efficiency;
        * a runtime whose MoE GEMMs are Ampere kernels (``Runtime.moe_gemm_mma_sync``): the rate of the
          experts' compute dtype · ``Hardware.mma_sync_matrix_fraction``, the share of the dense peak
          that warp-level ``mma.sync`` can issue (2/3 on Hopper, whose full rate needs ``wgmma``;
          1 where ``mma.sync`` is the native instruction: the pass's rate, None)."""
        legacy = (self.rt.moe_gemm_mma_sync and bool(self.model.n_moe_layers)
                  and bool(np.any(np.not_equal(self.hw.mma_sync_matrix_fraction, 1.0))))
        if not (self.experts_weight_only or legacy):
            return None
        rate = self.matrix_rate_for("fp16" if self.experts_weight_only else self.compute_dtype)
        return rate * self.hw.mma_sync_matrix_fraction if legacy else rate

    @functools.cached_property
    def attention_matrix_flops_per_s(self):
        """The attention kernels' matrix rate where it is not the pass's (None: ``matrix_flops_per_s``):
        an fp8 engine (matrix units in fp8) runs Q·K and P·V in fp16 when its runtime has no fp8
        attention kernels (``Runtime.fp8_context_fmha`` False) or its KV cache is not fp8 (K and V then
        reach the kernel as fp16 operands, stored so or dequantised: fp8 weights quantise the GEMMs, not
        attention): peak(fp16) · the
        hardware's fp16 GEMM fraction · compute_efficiency, half the fp8 rate on Hopper and Ada."""
        if self.rt.fp8_context_fmha and self.kv_dtype == "fp8":
            return None
        if self.dtype_members:           # stacked dtypes: each member's attention rate along the axis
            if all(e.attention_matrix_flops_per_s is None for e in self.dtype_members):
                return None
            return self.per_weight_dtype(lambda e: e.matrix_flops_per_s if e.attention_matrix_flops_per_s is None
                                         else e.attention_matrix_flops_per_s)
        if self.compute_dtype != "fp8":
            return None
        return self.matrix_rate_for("fp16")

    @functools.cached_property
    def expert_dequant_flops_per_weight(self) -> float:
        """Dequantisation FLOPs per expert weight: weight-only int8's (``Runtime.dequant_flops_per_weight_int8``,
        the same byte-to-fp16 conversion and scale) when ``experts_weight_only``, else the body's."""
        return float(self.rt.dequant_flops_per_weight_int8) if self.experts_weight_only else self.dequant_flops_per_weight


    @functools.cached_property
    def vector_flops_per_s(self) -> float:
        return self.hw.vector_flops_per_s * self.rt.compute_efficiency

    @functools.cached_property
    def hbm_bytes_per_s(self) -> float:
        """Achievable HBM bandwidth: datasheet · measured fraction · runtime factor, and at most
        sm_count · the runtime's per-SM bandwidth (``Runtime.sm_bandwidth_bytes_per_s``, when given):
        a kernel with few bytes in flight per SM cannot cover the DRAM latency on a GPU whose
        bandwidth needs more (Little's law), so it reaches the same absolute rate on an A100 as on an
        H100 PCIe while it reaches most of a GDDR card's lower peak."""
        bw = self.hw.bandwidth_bytes_per_s * self.hw.memory_efficiency * self.rt.bandwidth_efficiency
        cap = self.rt.sm_bandwidth_bytes_per_s
        return bw if cap is None else np.minimum(bw, self.hw.sm_count * cap)


def _along(shape: tuple, values: list):
    """Values of the members of a dtype axis of ``shape`` as one value: the first when all are
    equal (numbers compared as IEEE doubles bit for bit), else an array whose dtype axis holds each
    member's value (broadcast against the members' own shapes; each element a copy)."""
    first = values[0]
    if isinstance(first, (str, bool, np.bool_)) or first is None:
        if any(v != first for v in values[1:]):
            raise TypeError(f"the stacked weight dtypes differ in a decision ({values}): stack_signature")
        return first
    arrs = [np.asarray(v, dtype=float) for v in values]
    if all(a.ndim == 0 for a in arrs) and len({a.tobytes() for a in arrs}) == 1:
        return first
    full = broadcast_shape(shape, *(a.shape for a in arrs))
    out = np.empty(full)
    axis = len(full) - len(shape) + next(i for i, n in enumerate(shape) if n > 1)
    for i, a in enumerate(arrs):
        sl = (slice(None),) * axis + (slice(i, i + 1),)
        k = axis - (len(full) - a.ndim)          # the dtype axis among a's own dimensions (< 0: none)
        # a constant along the dtype axis broadcasts into its slot as it is (the same elements)
        out[sl] = a if k < 0 or a.shape[k] == 1 else np.broadcast_to(a, full)[sl]
    return out
