"""fp8 engines whose attention kernels are fp16 (TensorRT-LLM up to 0.9: ``fp8_context_fmha`` false).

TensorRT-LLM 0.9.0's release notes list FP8 FMHA as experimental (an opt-in build flag); an fp8
engine of the v0.9.0 performance tables runs its GEMMs in fp8 and its attention in fp16, on the fp16
tensor cores: half the fp8 rate on Hopper. The expected values below are computed by hand from the
hardware files (H100 SXM: fp16 dense 9.894e14 FLOP/s at the measured 0.798, fp8 dense 1.9789e15 at
0.698) and the model's shape (Llama-2-7B: 32 heads of 128).
"""

import dataclasses

import pytest

from costmodel.engine.evaluate import build_exec
from costmodel.engine.ops import layer_ops
from costmodel.engine.roofline import op_terms, unit_flops_per_s
from costmodel.engine.strategies.common import prefill_shape
from costmodel.inputs.record import parse_record
from costmodel.inputs.runtime import load_runtime, with_version


def _prefill_ops(runtime, weight_dtype="fp8", hardware="h100-sxm", prompt_len=2048.0, kv_dtype="fp8"):
    ex = build_exec(parse_record(dict(model="llama-2-7b", hardware=hardware, runtime=runtime, batch_size=1,
                                      prompt_len=int(prompt_len), gen_len=1, weight_dtype=weight_dtype,
                                      kv_dtype=kv_dtype)))
    return ex, {o.name: o for o in layer_ops(prefill_shape(1.0, prompt_len), ex)}


@pytest.mark.parametrize("asked, fp8_attention", [("0.5", False), ("0.6", False), ("0.9", False), ("0.10", True)])
def test_fp8_attention_kernels_by_version(asked, fp8_attention):
    assert load_runtime(f"trt-llm@{asked}").fp8_context_fmha is fp8_attention
    assert load_runtime("trt-llm").fp8_context_fmha           # the default (current) engine: unchanged


def test_a_2048_token_prefill_attention_on_h100_fp8_by_hand():
    """One layer's causal attention over a 2048-token prompt: pairs = 2048·2049/2 = 2,098,176;
    FLOPs = 4 · 32 heads · 128 · 2,098,176 = 34,376,515,584. Under 0.9 at the fp16 rate
    9.894e14 · 0.798 = 7.895412e14 FLOP/s: 43.540 µs; under 0.10 at the fp8 rate
    1.9789e15 · 0.698 = 1.3812722e15 FLOP/s: 24.888 µs (then below its 32.6 µs memory term)."""
    for runtime, rate, compute_s in (("trt-llm@0.9", 7.895412e14, 43.540e-6), ("trt-llm@0.10", 1.3812722e15, 24.888e-6)):
        ex, ops = _prefill_ops(runtime)
        att = ops["attention"]
        assert float(att.flops) == 34_376_515_584.0
        assert unit_flops_per_s(att, ex) == pytest.approx(rate, rel=1e-6)
        assert float(op_terms(att, ex)[0]) == pytest.approx(compute_s, rel=1e-4)
    # the GEMMs of the 0.9 engine stay fp8: the pass's own rate
    ex, ops = _prefill_ops("trt-llm@0.9")
    assert ops["qkv_proj"].unit_flops_per_s is None
    assert float(ex.matrix_flops_per_s) == pytest.approx(1.3812722e15, rel=1e-6)


def test_fp8_weights_over_a_2_byte_kv_cache_attend_in_fp16():
    """fp8 weights quantise the GEMMs; with an fp16 KV cache K and V are 2-byte operands, so even an
    engine with fp8 attention kernels (the current TensorRT-LLM, vLLM) multiplies Q·K and P·V on the
    fp16 units: the 2048-token layer above at 9.894e14 · 0.798 = 7.895412e14 FLOP/s, 43.540 µs, while
    the GEMMs keep the fp8 rate 1.3812722e15."""
    for runtime in ("trt-llm", "vllm"):
        ex, ops = _prefill_ops(runtime, kv_dtype="fp16")
        att = ops["attention"]
        assert unit_flops_per_s(att, ex) == pytest.approx(7.895412e14, rel=1e-6)
        assert float(op_terms(att, ex)[0]) == pytest.approx(43.540e-6, rel=1e-4)
        assert float(ex.matrix_flops_per_s) == pytest.approx(1.3812722e15, rel=1e-6)


def test_fp16_engines_and_parts_without_fp8_keep_the_pass_rate():
    """An fp16 engine (A100 rows of the same tables) and an fp8 model on a part without fp8 units
    (A100: weight-only, its matrices already on the fp16 units) have nothing to switch: None."""
    for weight_dtype, hardware in (("fp16", "h100-sxm"), ("fp16", "a100-80gb"), ("fp8", "a100-80gb")):
        ex, ops = _prefill_ops("trt-llm@0.9", weight_dtype=weight_dtype, hardware=hardware)
        assert ex.attention_matrix_flops_per_s is None
        assert ops["attention"].unit_flops_per_s is None


def test_an_ablated_versioned_profile_keeps_its_other_version_attributes():
    """The ablation hands the row's versioned profile over whole, fp8 attention switched on:
    ``with_version`` applies its version attributes (XQA group sizes, MoE flags) onto the fitted profile."""
    fitted = dataclasses.replace(load_runtime("trt-llm"), step_overhead_s=1.0e-3)
    given = dataclasses.replace(load_runtime("trt-llm@0.9"), fp8_context_fmha=True)
    rt = with_version(fitted, given)
    assert rt.step_overhead_s == 1.0e-3
    assert rt.fp8_context_fmha is True
    assert rt.moe_gemm_mma_sync is True and rt.fp8_moe_experts is False
    assert rt.gqa_grouped_group_sizes == load_runtime("trt-llm@0.9").gqa_grouped_group_sizes
    assert with_version(fitted, "trt-llm@0.9").fp8_context_fmha is False
