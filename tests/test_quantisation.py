"""Quantised weight storage as the runtimes store it (costmodel/dtypes.py, runtimes/*.yaml).

Every expected figure is computed by hand in the test from the model's dimensions:

* Llama-2-7B: 32 layers, d = 4096, d_ff = 11008, 32 heads (no GQA), vocab 32,000, untied.
  attention 4·4096² = 67,108,864, FFN 3·4096·11008 = 135,266,304 → 202,375,168 per layer,
  × 32 = 6,476,005,376 decoder-matrix weights; embedding = LM head = 32,000·4096 = 131,072,000;
  norms 2·4096·32 + 4096 = 266,240.
* Llama-3-8B: 32 layers, d = 4096, 8 KV heads of 128 (kv_dim 1024), d_ff = 14336, vocab 128,256.
  attention 4096·(4096 + 2048) + 4096² = 41,943,040, FFN 3·4096·14336 = 176,160,768
  → 218,103,808 per layer, × 32 = 6,979,321,856; embedding = LM head = 128,256·4096 = 525,336,576.
"""

from __future__ import annotations

import pytest

from costmodel import evaluate
from costmodel.inputs.dtypes import quantised_bytes_per_weight, weight_bytes_per_param
from costmodel.errors import InputError
from costmodel.engine.evaluate import build_exec
from costmodel.inputs.record import parse_record
from costmodel.inputs.runtime import load_runtime
from costmodel.inputs.specs import resolve

L7_BODY, L7_VOCAB_D, L7_NORMS = 6_476_005_376, 131_072_000, 266_240
L3_BODY, L3_VOCAB_D = 6_979_321_856, 525_336_576


def weights(model, runtime, dtype="int4", hardware="a100-80gb"):
    return evaluate(dict(model=model, hardware=hardware, runtime=runtime, weight_dtype=dtype,
                         batch_size=1, prompt_len=5))["weights_bytes"]


def test_format_formula():
    assert quantised_bytes_per_weight("int4", 32, 4.0) == 0.5 + 4 / 32 == 0.625
    assert quantised_bytes_per_weight("int4", 32, 2.0) == 18 / 32           # GGUF Q4_0
    assert quantised_bytes_per_weight("int8", 32, 2.0) == 34 / 32           # GGUF Q8_0
    assert quantised_bytes_per_weight("int8", None, 2.0, d_in=8192) == 1 + 2 / 8192   # per channel
    assert weight_bytes_per_param("int4") == 0.53125 and weight_bytes_per_param("int8") == 1.0


def test_gpt_fast_int4_g32_keeps_the_embedding_in_bf16():
    # quantised: decoder matrices + the output Linear, at 0.5 + 4/32 = 0.625 B; bf16 embedding and norms
    quant = L7_BODY + L7_VOCAB_D                                   # 6,607,077,376
    expect = quant * 0.625 + L7_VOCAB_D * 2 + L7_NORMS * 2         # 4,129,423,360 + 262,144,000 + 532,480
    assert expect == pytest.approx(4_392_099_840)
    got = weights("llama-2-7b", "compiled")
    assert got == pytest.approx(expect, rel=1e-12)
    # gpt-fast's own figure (README: 862.69 GB/s at 196.80 tok/s = 4.3836 GB) is within 0.2 %; the
    # former every-weight group-128 layout (0.53125 B for all 6.74e9 weights = 3.58 GB) was 18 % low
    assert got / 4.3836e9 == pytest.approx(1.0, abs=0.003)
    assert (L7_BODY + 2 * L7_VOCAB_D + L7_NORMS) * 0.53125 / 4.3836e9 < 0.83


def test_gpt_fast_int8_per_channel_bf16_scales():
    # one bf16 scale per output row: rows of a matrix = params / d_in (q/k/v/o, gate/up, LM head: d_in = 4096;
    # down: d_in = 11008, 4096·11008 weights per layer = 4096 rows)
    rows = 32 * (4 * 4096 + 2 * 11008 + 4096) + 32_000
    expect = (L7_BODY + L7_VOCAB_D) * 1.0 + rows * 2 + L7_VOCAB_D * 2 + L7_NORMS * 2
    assert weights("llama-2-7b", "compiled", "int8") == pytest.approx(expect, rel=1e-12)


def test_trt_llm_int4_keeps_embedding_and_lm_head_in_fp16():
    # GPTQ per group: 0.5 + (fp16 scale + fp16 zero)/128 = 0.53125 B; embedding and LM head fp16
    expect = L3_BODY * 0.53125 + 2 * L3_VOCAB_D * 2 + L7_NORMS * 2   # 3,707,764,736 + 2,101,346,304 + 532,480
    assert expect == pytest.approx(5_809_643_520)
    assert weights("llama-3-8b", "trt-llm", hardware="orin-agx-64gb") == pytest.approx(expect, rel=1e-12)
    # the 128K vocabulary in fp16 instead of int4: +2 · 525,336,576 · (2 − 0.53125) = +1.54 GB
    old = (L3_BODY + 2 * L3_VOCAB_D + L7_NORMS) * 0.53125
    assert expect - old == pytest.approx(2 * L3_VOCAB_D * (2 - 0.53125) + L7_NORMS * (2 - 0.53125))


def test_trt_llm_lm_head_is_read_in_fp16_each_decode_step():
    out = evaluate(dict(model="llama-3-8b", hardware="orin-agx-64gb", runtime="trt-llm", weight_dtype="int4",
                        batch_size=1, prompt_len=128), details=True)
    head = next(o for o in out["operators"] if o["name"] == "lm_head")
    # weights 525,336,576 · 2 B + activation in (4096 · 2 B) + fp32 logits (128,256 · 4 B)
    assert head["hbm_bytes"] == pytest.approx(L3_VOCAB_D * 2 + 4096 * 2 + 128_256 * 4)
    qkv = next(o for o in out["operators"] if o["name"] == "qkv_proj")
    # q, k, v of 32 layers: 4096 · 6144 weights at 0.53125 B (scales read with them) + 4096 + 6144 activations
    assert qkv["hbm_bytes"] == pytest.approx(32 * (4096 * 6144 * 0.53125 + (4096 + 6144) * 2))


def test_llama_cpp_q4_0_with_a_q6_k_output():
    # Q4_0 = 18 B / 32 weights for the decoder matrices and token_embd; output.weight Q6_K = 210 B / 256
    expect = (L7_BODY + L7_VOCAB_D) * 18 / 32 + L7_VOCAB_D * 210 / 256 + L7_NORMS * 2
    assert expect == pytest.approx(3_824_533_504)
    assert weights("llama-2-7b", "llama.cpp") == pytest.approx(expect, rel=1e-12)
    # the LM head is read in Q6_K at decode, dequantised like the rest
    ex = build_exec(parse_record(dict(model="llama-2-7b", hardware="a100-80gb", runtime="llama.cpp",
                                      weight_dtype="int4", batch_size=1, prompt_len=1)))
    assert ex.lm_head_w_bytes == 210 / 256 and ex.embedding_w_bytes == 18 / 32


def test_unquantised_dtypes_are_unchanged_by_the_runtime_format():
    for rt in ("compiled", "trt-llm", "llama.cpp", "eager"):
        n = build_exec(parse_record(dict(model="llama-2-7b", hardware="a100-80gb", runtime=rt,
                                         batch_size=1, prompt_len=5))).model.n_params
        assert weights("llama-2-7b", rt, "fp16") == pytest.approx(2 * n)


def test_tensor_parallel_splits_the_formatted_weights():
    one = evaluate(dict(model="llama-3-8b", hardware="a100-80gb", runtime="trt-llm", weight_dtype="int4",
                        batch_size=1, prompt_len=5))
    four = evaluate(dict(model="llama-3-8b", hardware="a100-80gb", runtime="trt-llm", weight_dtype="int4",
                         batch_size=1, prompt_len=5, n_devices=4))
    # 8 KV heads over 4 devices: no replication, so each device holds a quarter
    assert four["memory_target_weights_bytes"] == pytest.approx(one["memory_target_weights_bytes"] / 4)


def _rt(tmp_path, extra: str):
    base = resolve("runtimes", "compiled", "runtime").read_text(encoding="utf-8")
    keep = "\n".join(line for line in base.splitlines()
                     if not line.startswith(("int4_", "int8_", "quantize_", "lm_head_")))
    p = tmp_path / "rt.yaml"
    p.write_text(keep + "\n" + extra + "\n")
    return str(p)


@pytest.mark.parametrize("extra, field", [
    ("int4_group_size: {value: sixteen, source: x}", "int4_group_size.value"),
    ("int4_group_size: {value: 0, source: x}", "int4_group_size.value"),
    ("int8_group_size: {value: 2.5, source: x}", "int8_group_size.value"),
    ("int4_scale_bytes_per_group: {value: -1, source: x}", "int4_scale_bytes_per_group.value"),
    ("int4_scale_bytes_per_group: {value: 4}", "int4_scale_bytes_per_group.source"),
    ("quantize_lm_head: {value: 'no', source: x}", "quantize_lm_head.value"),
    ("lm_head_bytes_per_weight_int4: {value: 9, source: x}", "lm_head_bytes_per_weight_int4.value"),
])
def test_bad_format_fields_name_file_and_field(tmp_path, extra, field):
    path = _rt(tmp_path, extra)
    with pytest.raises(InputError) as e:
        load_runtime(path)
    assert field in str(e.value) and "rt.yaml" in str(e.value)


def test_runtime_without_a_format_keeps_the_default_layout(tmp_path):
    rt = load_runtime(_rt(tmp_path, ""))
    assert (rt.int4_group_size, rt.int4_scale_bytes_per_group, rt.quantize_embedding, rt.quantize_lm_head) == \
        (128, 4.0, True, True)
    assert load_runtime(_rt(tmp_path, "int8_group_size: {value: channel, source: x}")).int8_group_size is None


def test_unquantised_lm_head_spends_no_dequantisation():
    from costmodel.engine.ops import gemm

    def head(rt):
        ex = build_exec(parse_record(dict(model="llama-3-8b", hardware="a100-80gb", runtime=rt, weight_dtype="int4",
                                          batch_size=1, prompt_len=5)))
        return ex, gemm("lm_head", L3_VOCAB_D, 1.0, 4096, 0, ex, count=1)

    ex, op = head("trt-llm")           # fp16 head: plain fp16 GEMV, nothing to unpack
    assert op.dequant_flops == 0.0 and ex.dequant_flops_per_weight == 4.0
    ex, op = head("llama.cpp")         # Q6_K head: dequantised like the Q4_0 body (1 op per weight)
    assert op.dequant_flops == pytest.approx(L3_VOCAB_D * 1.0)


# ------------------------------------------------------------------ fp8

def test_fp8_on_a_gpu_without_fp8_units_runs_weight_only_on_fp16_tensor_cores():
    """A100 has no fp8 tensor cores: fp8 weights are upcast and multiplied on the fp16 units, as
    int8 weight-only kernels do. Llama-2-7B prefill of 2048 tokens: 2 · 6,476,005,376 · 2048 =
    2.653e13 FLOPs of decoder GEMMs; at the 312 TFLOP/s fp16 peak that is 0.085 s, at the 19.5
    TFLOP/s fp32 vector rate (the old fallback) 1.36 s. TTFT must lie near the fp16 figure."""
    out = evaluate(dict(model="llama-2-7b", hardware="a100-80gb", weight_dtype="fp8", batch_size=1,
                        prompt_len=2048, gen_len=16))
    fp16 = evaluate(dict(model="llama-2-7b", hardware="a100-80gb", weight_dtype="fp16", batch_size=1,
                         prompt_len=2048, gen_len=16))
    assert 2 * 6_476_005_376 * 2048 / 312e12 <= out["ttft_s"] < 0.2
    assert out["ttft_s"] == pytest.approx(fp16["ttft_s"], rel=0.1)
    assert "fp8 weights run weight-only on fp16 tensor cores on a100-80gb" in out["notes"]


def test_fp8_on_h100_uses_the_fp8_tensor_cores():
    """H100 SXM: fp8 dense peak 1979 TFLOP/s, twice fp16's 989: a compute-bound prefill is faster."""
    kw = dict(model="llama-2-7b", hardware="h100-sxm", batch_size=8, prompt_len=2048, gen_len=16)
    fp8, fp16 = evaluate(dict(kw, weight_dtype="fp8")), evaluate(dict(kw, weight_dtype="fp16"))
    assert fp8["ttft_s"] < fp16["ttft_s"] / 1.4
    assert not any("weight-only" in n for n in fp8["notes"])


def test_kv_dtype_defaults_to_the_activation_dtype_not_the_weight_dtype():
    """vLLM and TensorRT-LLM keep the KV cache in the activation dtype unless told otherwise
    (kv_cache_dtype='auto'): Llama-2-7B KV per token = 2 · 32 layers · 4096 · 2 bytes = 524,288 B even
    with fp8 weights; kv_dtype=fp8 halves it to 262,144."""
    base = dict(model="llama-2-7b", hardware="h100-sxm", weight_dtype="fp8", batch_size=1, prompt_len=128)
    assert evaluate(base)["kv_bytes_per_token"] == 2 * 32 * 4096 * 2
    assert evaluate(dict(base, kv_dtype="fp8"))["kv_bytes_per_token"] == 2 * 32 * 4096 * 1
    assert any("kv_dtype" in n for n in evaluate(base)["notes"])
