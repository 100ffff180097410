"""Bytes per element of each storage dtype, quantised weight formats, and the dtype GEMMs compute in.

Weight-only quantised formats (int8, int4) store each weight in ``BYTES_PER_ELEMENT`` bytes plus
its share of the quantisation metadata: one scale (and, for asymmetric formats, one zero point)
per group of ``group_size`` consecutive weights along the input dimension::

    bytes per weight = element bytes + scale_bytes_per_group / group_size      (group_size = d_in: per channel)

Examples (the runtime profiles in ``runtimes/*.yaml`` carry the format of each stack, with sources):

* gpt-fast int4, group 32, bf16 scale + bf16 zero:       0.5 + 4/32  = 0.625   B/weight
* TensorRT-LLM int4 GPTQ, group 128, fp16 scale + zero:  0.5 + 4/128 = 0.53125 B/weight
* llama.cpp Q4_0, blocks of 32 with one fp16 scale:      0.5 + 2/32  = 0.5625  B/weight (18 B / 32)
* llama.cpp Q8_0, blocks of 32 with one fp16 scale:      1.0 + 2/32  = 1.0625  B/weight (34 B / 32)
* gpt-fast int8, one bf16 scale per output channel:      1.0 + 2/d_in

Which tensors a stack quantises is a runtime property too (``Runtime.quantize_embedding``,
``Runtime.quantize_lm_head``): tensors left unquantised stay in the activation dtype (fp16/bf16);
``execution.Exec`` applies the format per tensor. Without a runtime (``weight_bytes_per_param``) the
defaults below describe a generic AWQ/GPTQ-like layout applied to every weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.errors import InputError

DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")

BYTES_PER_ELEMENT = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
                     "nvfp4": 0.5, "mxfp4": 0.5}

#: 4-bit floating-point block formats (E2M1 elements): (block size along K, scale bytes per block).
#: NVFP4: one FP8 E4M3 scale per 16 elements (+ one FP32 per tensor, negligible): 0.5 + 1/16 = 0.5625 B;
#: MXFP4 (OCP Microscaling v1.0): one E8M0 scale per 32 elements: 0.5 + 1/32 = 0.53125 B (17 B per 32).
#: Fixed by the format, not by the runtime. Blackwell (and CDNA4 for MXFP4) multiply them natively
#: (``matrix_flops_per_s.fp4``); other GPUs dequantise them weight-only, as they do int4.
FP4_BLOCK_FORMATS = {"nvfp4": (16, 1.0), "mxfp4": (32, 1.0)}

#: storage dtypes with per-group/per-block scales (stored narrower than they compute, except fp4 on
#: hardware with fp4 matrix units)
QUANTISED = ("int8", "int4", "nvfp4", "mxfp4")

#: default group size per quantised dtype when a runtime gives none: int4 groups of 128 (AWQ/GPTQ
#: layout), int8 per output channel (``None`` = the group is the whole input row, d_in weights)
DEFAULT_GROUP_SIZE = {"int4": 128, "int8": None}
#: default scale (+ zero point) bytes per group: int4 fp16 scale + fp16 zero = 4 bytes; int8 per-channel
#: scales counted as ~0 (2 bytes per row of thousands of weights)
DEFAULT_SCALE_BYTES_PER_GROUP = {"int4": 4.0, "int8": 0.0}


def quantised_bytes_per_weight(dtype: str, group_size, scale_bytes_per_group: float, d_in=None) -> float:
    """Element bytes + scale bytes / group: e.g. int4 with 4 bytes per group of 32 = 0.5 + 4/32 = 0.625.

    ``group_size`` None means per output channel: one group per input row of ``d_in`` weights
    (``d_in`` None: the scales are counted as 0)."""
    check(dtype, "weight_dtype")
    g = group_size if group_size is not None else d_in
    if np.ndim(g):                          # per-device input rows over an array of device counts
        return BYTES_PER_ELEMENT[dtype] + scale_bytes_per_group / g
    return BYTES_PER_ELEMENT[dtype] + (scale_bytes_per_group / g if g else 0.0)


def weight_bytes_per_param(dtype: str) -> float:
    """Storage bytes per weight in the default layout (no runtime): int4 = 0.5 + 4/128 = 0.53125,
    int8 = 1.0; the runtime-aware figure is ``execution.Exec.w_bytes``."""
    check(dtype, "weight_dtype")
    if dtype in FP4_BLOCK_FORMATS:
        return quantised_bytes_per_weight(dtype, *FP4_BLOCK_FORMATS[dtype])
    if dtype in QUANTISED:
        return quantised_bytes_per_weight(dtype, DEFAULT_GROUP_SIZE[dtype], DEFAULT_SCALE_BYTES_PER_GROUP[dtype])
    return BYTES_PER_ELEMENT[dtype]


def kv_bytes_per_element(dtype: str) -> float:
    check(dtype, "kv_dtype")
    if dtype == "int4":
        return 0.5 + 4.0 / 128
    return BYTES_PER_ELEMENT[dtype]


def compute_dtype(weight_dtype: str, hw=None) -> str:
    """Dtype of the matrix units: weight-only int8/int4 dequantise to fp16; fp8 runs on fp8 units where
    the hardware has them (``hw.supports('fp8')``) and weight-only on the fp16 units where it has not
    (A100, V100, T4, A10G: the stacks upcast fp8 weights in the GEMM, e.g. vLLM's fp8 Marlin kernel);
    nvfp4/mxfp4 run on fp4 units where ``hw`` has them (``hw.supports('fp4')``), else weight-only
    dequantised to fp16 like int4."""
    if weight_dtype in FP4_BLOCK_FORMATS:
        return "fp4" if hw is not None and hw.supports("fp4") else "fp16"
    if weight_dtype == "fp8" and hw is not None and not hw.supports("fp8"):
        return "fp16"
    return {"int8": "fp16", "int4": "fp16"}.get(weight_dtype, weight_dtype)


def weight_only(weight_dtype: str, hw=None) -> bool:
    """Whether the weights are dequantised to fp16 inside the GEMM (int8/int4, fp8 without fp8 units,
    nvfp4/mxfp4 without fp4 units)."""
    if weight_dtype in ("int8", "int4"):
        return True
    return weight_dtype in ("fp8",) + tuple(FP4_BLOCK_FORMATS) and compute_dtype(weight_dtype, hw) == "fp16"


def default_kv_dtype(weight_dtype: str) -> str:
    """The KV cache dtype when none is given: the activation dtype (vLLM ``kv_cache_dtype='auto'``,
    TensorRT-LLM without ``--kv_cache_dtype``), i.e. bf16 for bf16 models, fp32 for fp32, else fp16."""
    return weight_dtype if weight_dtype in ("fp32", "bf16") else "fp16"


def activation_bytes(weight_dtype: str) -> float:
    """Activations stay in fp16/bf16 (fp32 for an fp32 model)."""
    return 4.0 if weight_dtype == "fp32" else 2.0


@dataclass(frozen=True, eq=False)
class WeightDtypes:
    """Several weight dtypes along one axis of a sweep's grid (``shape``: 1 everywhere but that
    axis), as one ``Exec.weight_dtype``: every number an Exec derives from its weight dtype is then
    an array of its members' own figures (``costmodel.engine.execution.Exec.per_weight_dtype``), so a
    pass is priced for all of them in one array evaluation, element for element the same
    floating-point operations as for each alone. The members agree on :func:`stack_signature`."""

    members: tuple
    shape: tuple

    __hash__ = object.__hash__            # identity, like a HardwareStack


def stack_signature(weight_dtype: str):
    """What the engine decides on (rather than computes with) about a weight dtype: the matrix
    units' dtype, the default KV dtype and the activation bytes; None for fp8 and the fp4 formats,
    whose compute dtype depends on the device. Dtypes with one signature may share a sweep block
    (:class:`WeightDtypes`)."""
    if weight_dtype not in BYTES_PER_ELEMENT or weight_dtype == "fp8" or weight_dtype in FP4_BLOCK_FORMATS:
        return None
    return compute_dtype(weight_dtype), default_kv_dtype(weight_dtype), activation_bytes(weight_dtype)


def check(dtype: str, field: str) -> str:
    if dtype not in BYTES_PER_ELEMENT:
        raise InputError(f"unknown dtype {dtype!r}", field=field, allowed=", ".join(DTYPES))
    return dtype
