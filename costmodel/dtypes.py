"""Bytes per element of each storage dtype, and the dtype GEMMs compute in."""

from __future__ import annotations

from .errors import InputError

DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")

BYTES_PER_ELEMENT = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

#: Quantisation scales per weight: int8 per-output-channel fp16 scale (~0 per weight); int4 grouped
#: (group 128) with an fp16 scale and fp16 zero point = 4 bytes / 128 weights (AWQ/GPTQ layout).
SCALE_BYTES_PER_WEIGHT = {"int8": 0.0, "int4": 4.0 / 128}


def weight_bytes_per_param(dtype: str) -> float:
    """Storage bytes per weight including quantisation scales: int4 = 0.5 + 4/128 = 0.53125."""
    check(dtype, "weight_dtype")
    return BYTES_PER_ELEMENT[dtype] + SCALE_BYTES_PER_WEIGHT.get(dtype, 0.0)


def kv_bytes_per_element(dtype: str) -> float:
    check(dtype, "kv_dtype")
    if dtype == "int4":
        return 0.5 + 4.0 / 128
    return BYTES_PER_ELEMENT[dtype]


def compute_dtype(weight_dtype: str) -> str:
    """Dtype of the matrix units: weight-only int8/int4 dequantise to fp16; fp8 runs on fp8 units."""
    return {"int8": "fp16", "int4": "fp16"}.get(weight_dtype, weight_dtype)


def activation_bytes(weight_dtype: str) -> float:
    """Activations stay in fp16/bf16 (fp32 for an fp32 model)."""
    return 4.0 if weight_dtype == "fp32" else 2.0


def check(dtype: str, field: str) -> str:
    if dtype not in BYTES_PER_ELEMENT:
        raise InputError(f"unknown dtype {dtype!r}", field=field, allowed=", ".join(DTYPES))
    return dtype
