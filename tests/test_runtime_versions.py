"""Engine versions in runtime profiles (``runtime=vllm@0.6``): selection, host work, scheduler defaults.

Expected values are the YAML's sourced figures with the arithmetic written out:
vllm@0.5 host_step_s = 0.62 × 13 ms = 8.06 ms ≈ 8.1 ms; vllm@0.6 host_step_s = 0.29 × 13 ms ≈ 3.8 ms;
both grow by host_per_seq_s = (20 ms − 3.8 ms) / (200 − 1) sequences = 81 µs per running sequence per step
(20 ms between steps at batch 200, vllm-project/vllm#6801); the default version (V1, 0.8) adds nothing,
so bare ``vllm`` keeps its numbers."""

import pytest

import costmodel
from costmodel.errors import InputError
from costmodel.inputs.runtime import load_runtime, parse_runtime

BASE = {"model": "llama-3-8b", "hardware": "h100-sxm", "batch_size": 1, "prompt_len": 512, "gen_len": 128}


def _eval(runtime, **kw):
    return costmodel.evaluate(dict(BASE, runtime=runtime, **kw))


@pytest.mark.parametrize("asked, picked", [("0.5", "0.5"), ("0.5.3", "0.5"), ("0.6", "0.6"), ("0.6.3", "0.6"),
                                           ("0.7", "0.6"), ("0.8", "0.8"), ("0.11", "0.8"), ("1.0", "0.8")])
def test_newest_listed_version_not_above_the_one_asked(asked, picked):
    assert load_runtime(f"vllm@{asked}").version == picked


def test_bare_id_is_the_default_version_and_adds_no_host_work():
    rt = load_runtime("vllm")
    assert rt.version == "0.8" and rt.host_step_s == 0.0 and rt.host_per_seq_s == 0.0
    assert _eval("vllm") == _eval("vllm@0.8")


@pytest.mark.parametrize("bad, words", [("vllm@0.4", "no profile for vllm@0.4"), ("mlc@0.9", "has no versions"),
                                        ("vllm@x.y", "not a version number")])
def test_bad_versions_are_input_errors(bad, words):
    with pytest.raises(InputError, match=words):
        load_runtime(bad)


@pytest.mark.parametrize("version, host_s", [("0.5", 0.0081 + 81e-6), ("0.6", 0.0038 + 81e-6)])
def test_evaluate_adds_the_version_host_work_to_every_step_and_the_prefill(version, host_s):
    """Batch 1, single-step scheduling: each decoding step and the prefill (a scheduler invocation of
    its own) wait host_step_s + 1 × host_per_seq_s longer than under the default version
    (0.5: 8.1 + 0.081 = 8.181 ms; 0.6: 3.8 + 0.081 = 3.881 ms)."""
    base, v = _eval("vllm"), _eval(f"vllm@{version}")
    assert v["time_per_output_token_s"] - base["time_per_output_token_s"] == pytest.approx(host_s, abs=1e-12)
    assert v["ttft_s"] - base["ttft_s"] == pytest.approx(host_s, abs=1e-12)


@pytest.mark.parametrize("batch, host_s", [(8, 0.0038 + 8 * 81e-6), (200, 0.020)])
def test_vllm_0_6_host_work_grows_with_the_running_batch(batch, host_s):
    """vllm@0.6 decoding step over the default version: host_step_s + batch × host_per_seq_s,
    batch 8: 3.8 + 8 × 0.081 = 4.448 ms; batch 200: 3.8 + 200 × 0.081 = 20.0 ms, the 20 ms between
    steps at batch 200 that vllm-project/vllm#6801 reports (the figure the per-sequence value comes from)."""
    base, v = _eval("vllm", batch_size=batch), _eval("vllm@0.6", batch_size=batch)
    assert v["time_per_output_token_s"] - base["time_per_output_token_s"] == pytest.approx(host_s, abs=1e-12)


def test_serving_takes_the_version_scheduler_defaults():
    """vLLM 0.6 (V0): chunked prefill off, max_num_batched_tokens = max(max_model_len, 2048):
    llama-3-8b 8192, llama-3.1-8b 131072; given workload fields win."""
    from costmodel.serving.api import split_fields
    _, w = split_fields({"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm@0.6"})
    assert (w.chunked_prefill, w.max_num_batched_tokens, w.max_num_seqs, w.num_scheduler_steps) == (False, 8192, 256, 1)
    _, w = split_fields({"model": "llama-3.1-8b", "hardware": "h100-sxm", "runtime": "vllm@0.6"})
    assert w.max_num_batched_tokens == 131072
    _, w = split_fields({"model": "llama-3.1-8b", "hardware": "h100-sxm", "runtime": "vllm@0.6"},
                        {"chunked_prefill": "true", "max_num_batched_tokens": 4096, "max_num_seqs": 64})
    assert (w.chunked_prefill, w.max_num_batched_tokens, w.max_num_seqs) == (True, 4096, 64)
    _, w = split_fields({"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm"})
    assert (w.chunked_prefill, w.max_num_batched_tokens, w.max_num_seqs) == (True, 8192, 256)


def test_multi_step_scheduling_amortises_the_host_work_under_load():
    """One request alone (no queueing): TPOT over the default version grows by host_step_s per step
    single-step (3.8 ms) and by host_step_s / 10 = 0.38 ms with num_scheduler_steps=10, plus the one
    running sequence's output processing every step either way (host_per_seq_s = 0.081 ms: 3.881 ms and
    0.461 ms); the first token's prefill step pays the whole 3.8 ms + 0.081 ms for its one chunk."""
    kw = dict(request_rate=0.01, num_requests=1, prompt_len=512, gen_len=101)
    rec = {"model": "llama-3-8b", "hardware": "h100-sxm"}
    r0 = costmodel.serve(dict(rec, runtime="vllm"), **kw)
    r1 = costmodel.serve(dict(rec, runtime="vllm@0.6"), **kw)
    r10 = costmodel.serve(dict(rec, runtime="vllm@0.6"), num_scheduler_steps=10, **kw)
    assert r1["tpot_s"]["mean"] - r0["tpot_s"]["mean"] == pytest.approx(0.0038 + 0.000081, abs=1e-9)
    assert r10["tpot_s"]["mean"] - r0["tpot_s"]["mean"] == pytest.approx(0.00038 + 0.000081, abs=1e-9)
    assert r1["ttft_s"]["mean"] - r0["ttft_s"]["mean"] == pytest.approx(0.0038 + 0.000081, abs=1e-9)


def _profile(versions, default="1.0"):
    d = {"id": "x", "name": "x", "uses_cuda_graphs": True, "fused_attention": True, "default_version": default,
         "versions": versions}
    for k in ("kernels_per_layer", "kernels_per_pass", "host_per_kernel_s", "step_overhead_s",
              "memory_overhead_bytes"):
        d[k] = {"value": 0.0, "source": "test"}
    for k in ("bandwidth_efficiency", "compute_efficiency"):
        d[k] = {"value": 1.0, "source": "test"}
    return d


def test_version_entries_are_validated():
    ok = {"1.0": {"source": "s", "host_step_s": {"value": 0.002, "source": "s"},
                  "scheduler": {"value": {"chunked_prefill": False, "max_num_seqs": 128}, "source": "s"}}}
    rt = parse_runtime(_profile(ok), "t.yaml")
    assert rt.host_step_s == 0.002 and rt.scheduler_default("max_num_seqs") == 128
    assert rt.host_s(seqs=4, steps_per_schedule=4) == pytest.approx(0.0005)
    for bad, words in ((({"1.0": {"source": "s", "host_step_s": {"value": -1, "source": "s"}}}), "host_step_s"),
                       (({"1.0": {"source": "s", "scheduler": {"value": {"max_num_seq": 1}, "source": "s"}}}),
                        "unknown scheduler setting"),
                       (({"1.0": {"source": "s", "speed": 1}}), "unknown field"),
                       (({"2.0": {"source": "s"}}), "default_version")):
        with pytest.raises(InputError, match=words):
            parse_runtime(_profile(bad), "t.yaml")


# --- TensorRT-LLM: GQA generation kernels (XQA) from 0.7 -------------------------------------------------

@pytest.mark.parametrize("asked, picked, mode", [("0.5", "0.5", "per_query_head"), ("0.5.0", "0.5", "per_query_head"),
                                                 ("0.6.1", "0.6", "per_query_head"), ("0.7", "0.7", "grouped"),
                                                 ("0.9", "0.7", "grouped")])
def test_trt_llm_versions_before_0_7_read_a_gqa_kv_head_once_per_query_head(asked, picked, mode):
    rt = load_runtime(f"trt-llm@{asked}")
    assert (rt.version, rt.gqa_attention) == (picked, mode)
    assert load_runtime("trt-llm").gqa_attention == "grouped"    # the default (current) engine


def test_trt_llm_0_5_gqa_extra_bytes_by_hand():
    """Llama-2-70B (64 query heads, 8 KV heads, head_dim 128) TP1 on an H200 (L2 52,428,800 bytes), fp16
    KV: r = 64/8 = 8; one layer's KV per token = 2 (K, V) x 8 x 128 x 2 bytes = 4096 bytes; 102,400
    context tokens -> K = 419,430,400 bytes, h = 52,428,800 / 419,430,400 = 0.125; per_query_head
    re-reads K r - 1 = 7 times: HBM 7 x K x 0.875 = 2,569,011,200 bytes, L2 7 x K x 0.125 = 367,001,600."""
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.kv_reads import gqa_extra_bytes
    from costmodel.inputs.record import parse_record
    rec = dict(model="llama-2-70b", hardware="h200", batch_size=1, prompt_len=1, gen_len=1, kv_dtype="fp16")
    hbm, l2 = gqa_extra_bytes(build_exec(parse_record(dict(rec, runtime="trt-llm@0.5"))), 102400)
    assert float(hbm) == pytest.approx(2_569_011_200, rel=1e-12)
    assert float(l2) == pytest.approx(367_001_600, rel=1e-12)
    assert gqa_extra_bytes(build_exec(parse_record(dict(rec, runtime="trt-llm@0.7"))), 102400) == (None, None)


def test_trt_llm_0_9_xqa_only_for_eight_query_heads_per_kv_head_by_hand():
    """TensorRT-LLM 0.7-0.9 ship the one-token XQA kernel for 8 query heads per KV head only: Llama-2-70B
    (64/8 = 8) reads each KV head once, Mistral-7B (32 query heads, 8 KV heads, head_dim 128: r = 4) falls
    back to masked MHA. On an H200 (L2 52,428,800 bytes), fp16 KV: one layer's KV per token = 2 x 8 x 128 x 2
    = 4096 bytes; 102,400 context tokens -> K = 419,430,400 bytes, h = 52,428,800 / 419,430,400 = 0.125;
    r - 1 = 3 re-reads: HBM 3 x K x 0.875 = 1,101,004,800 bytes, L2 3 x K x 0.125 = 157,286,400. From 0.10
    (the default engine) every group size has its grouped kernel."""
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.kv_reads import gqa_extra_bytes
    from costmodel.inputs.record import parse_record
    rec = dict(model="mistral-7b", hardware="h200", batch_size=1, prompt_len=1, gen_len=1, kv_dtype="fp16")
    hbm, l2 = gqa_extra_bytes(build_exec(parse_record(dict(rec, runtime="trt-llm@0.9"))), 102400)
    assert float(hbm) == pytest.approx(1_101_004_800, rel=1e-12)
    assert float(l2) == pytest.approx(157_286_400, rel=1e-12)
    assert gqa_extra_bytes(build_exec(parse_record(dict(rec, runtime="trt-llm"))), 102400) == (None, None)
    llama70 = dict(rec, model="llama-2-70b", runtime="trt-llm@0.9")
    assert gqa_extra_bytes(build_exec(parse_record(llama70)), 102400) == (None, None)
    assert gqa_extra_bytes(build_exec(parse_record(dict(llama70, n_devices=4))), 102400) == (None, None)  # 16/2


@pytest.mark.parametrize("bad", [[], [0], [8.5], "8", [True]])
def test_gqa_grouped_group_sizes_must_be_a_list_of_positive_integers(bad):
    v = {"1.0": {"source": "s", "gqa_grouped_group_sizes": {"value": bad, "source": "s"}}}
    with pytest.raises(InputError, match="gqa_grouped_group_sizes"):
        parse_runtime(_profile(v), "t.yaml")


def test_a_fitted_profile_keeps_the_row_version_attributes():
    """Validation swaps in the fitted profile of the runtime id; the row's engine version still applies."""
    import dataclasses

    from costmodel.calibration.validate import parse_measurement, record_for
    m = parse_measurement({"id": "x", "metric": "tokens_per_s", "value": 1, "model": "llama-2-70b",
                           "hardware": "h200", "runtime": "trt-llm@0.5", "batch_size": 1, "prompt_len": 1,
                           "gen_len": 1})
    fitted = dataclasses.replace(load_runtime("trt-llm"), step_overhead_s=0.001)
    rt = record_for(m, {"trt-llm": fitted}).runtime
    assert (rt.gqa_attention, rt.version, rt.step_overhead_s) == ("per_query_head", "0.5", 0.001)


# --- TensorRT-LLM: fp8 MoE experts from 0.10 ---------------------------------------------------------------

def _moe_ffn(runtime, weight_dtype="fp8", hardware="h100-sxm", tokens=512.0):
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.ops import PassShape, layer_ops
    from costmodel.inputs.record import parse_record
    ex = build_exec(parse_record(dict(model="mixtral-8x7b", hardware=hardware, runtime=runtime, batch_size=1,
                                      prompt_len=1, gen_len=1, weight_dtype=weight_dtype, kv_dtype="fp16")))
    op = next(o for o in layer_ops(PassShape(tokens=tokens, pairs=0.0, kv_hbm_tokens=0.0), ex) if o.name == "moe_ffn")
    return ex, op


@pytest.mark.parametrize("asked, picked, fp8_experts", [("0.5", "0.5", False), ("0.9", "0.7", False),
                                                        ("0.10", "0.10", True), ("0.12", "0.10", True)])
def test_trt_llm_versions_before_0_10_have_no_fp8_moe(asked, picked, fp8_experts):
    rt = load_runtime(f"trt-llm@{asked}")
    assert (rt.version, rt.fp8_moe_experts) == (picked, fp8_experts)
    assert load_runtime("trt-llm").fp8_moe_experts          # the default (current) engine


def test_trt_llm_0_9_fp8_mixtral_experts_by_hand():
    """Mixtral-8x7B (d 4096, expert d_ff 14336, 8 experts, top-2) fp8 on one H100 SXM, 512 tokens in the
    pass. One expert: 3 x 4096 x 14336 = 176,160,768 weights; every expert is touched
    (8 x (1 - 0.75^512) = 8 to 1e-60). FLOPs = 2 x 176,160,768 x 2 (k) x 512 = 360,777,252,864 either way;
    bytes = 8 x 176,160,768 x 1 + 512 x (4096 + 4096) x 2 bytes x 2 (k) = 1,409,286,144 + 16,777,216
    = 1,426,063,360 either way (1-byte weights).
    0.10+: fp8 GEMM at 1.9789e15 x 0.698 = 1.38127e15 FLOP/s, no dequantisation.
    0.9: weight-only, in the Ampere (mma.sync) grouped GEMM: fp16 rate 9.894e14 x 0.798 x 0.667 (the
    share of the H100 peak mma.sync issues) = 5.26624e14 FLOP/s (trt-llm compute_efficiency 1.0)
    plus int8's 2 dequantisation FLOPs per weight read: 8 x 176,160,768 x 2 = 2,818,572,288."""
    from costmodel.engine.roofline import unit_flops_per_s
    new_ex, new = _moe_ffn("trt-llm@0.10")
    old_ex, old = _moe_ffn("trt-llm@0.9")
    assert float(new.flops) == float(old.flops) == pytest.approx(360_777_252_864, rel=1e-12)
    assert float(new.hbm_bytes) == float(old.hbm_bytes) == pytest.approx(1_426_063_360, rel=1e-9)
    assert unit_flops_per_s(new, new_ex) == pytest.approx(1.9789e15 * 0.698, rel=1e-12)
    assert unit_flops_per_s(old, old_ex) == pytest.approx(9.894e14 * 0.798 * 0.667, rel=1e-12)
    assert (float(new.dequant_flops), float(old.dequant_flops)) == (0.0, pytest.approx(2_818_572_288, rel=1e-12))
    # the other linears stay fp8: the non-expert operators are the same; attention runs in fp16 at
    # 9.894e14 x 0.798 FLOP/s under both, since this record's KV cache is fp16 (0.9 has no fp8 attention
    # kernels at all: fp8_context_fmha; 0.10 has them, but multiplies 2-byte K and V in fp16)
    from costmodel.engine.ops import PassShape, layer_ops
    shape = PassShape(tokens=512.0, pairs=0.0, kv_hbm_tokens=0.0)
    rest = [[(o.name, float(o.flops), float(o.hbm_bytes), o.unit_flops_per_s) for o in layer_ops(shape, ex)
             if o.name not in ("moe_ffn", "attention")] for ex in (new_ex, old_ex)]
    assert rest[0] == rest[1]
    att = [next(o for o in layer_ops(shape, ex) if o.name == "attention") for ex in (new_ex, old_ex)]
    assert att[0].unit_flops_per_s == att[1].unit_flops_per_s == pytest.approx(9.894e14 * 0.798, rel=1e-12)


# --- TensorRT-LLM up to 0.9: Ampere (mma.sync) MoE GEMMs on Hopper -------------------------------------

@pytest.mark.parametrize("asked, legacy", [("0.5", True), ("0.6", True), ("0.9", True), ("0.10", False)])
def test_trt_llm_moe_gemm_kernels_by_version(asked, legacy):
    assert load_runtime(f"trt-llm@{asked}").moe_gemm_mma_sync is legacy
    assert not load_runtime("trt-llm").moe_gemm_mma_sync      # the default (current) engine


@pytest.mark.parametrize("hardware, peak, gemm_fraction", [("h100-sxm", 9.894e14, 0.798), ("h200", 9.894e14, 0.799)])
def test_trt_llm_0_9_fp16_experts_on_hopper_run_at_the_mma_sync_ceiling(hardware, peak, gemm_fraction):
    """An fp16 Mixtral engine on Hopper under 0.9: its other matrices run cuBLAS (wgmma) at the full
    fp16 rate, 9.894e14 x 0.798 = 7.89541e14 FLOP/s on an H100 SXM, its experts in the Ampere grouped
    GEMM at 2/3 of that peak: 9.894e14 x 0.798 x 0.667 = 5.26624e14 FLOP/s (H200: x 0.799 =
    5.27284e14). 0.10 runs them at the pass's rate (None). FLOPs and bytes are the same in both."""
    from costmodel.engine.roofline import unit_flops_per_s
    old_ex, old = _moe_ffn("trt-llm@0.9", weight_dtype="fp16", hardware=hardware)
    new_ex, new = _moe_ffn("trt-llm@0.10", weight_dtype="fp16", hardware=hardware)
    assert unit_flops_per_s(old, old_ex) == pytest.approx(peak * gemm_fraction * 0.667, rel=1e-12)
    assert old_ex.matrix_flops_per_s == pytest.approx(peak * gemm_fraction, rel=1e-12)
    assert new.unit_flops_per_s is None
    assert unit_flops_per_s(new, new_ex) == pytest.approx(peak * gemm_fraction, rel=1e-12)
    assert (float(old.flops), float(old.hbm_bytes)) == (float(new.flops), float(new.hbm_bytes))


def test_trt_llm_0_9_experts_on_ampere_and_ada_keep_their_rate():
    """On an A100 (and an L40S) mma.sync is the native instruction: no share is recorded (1), and the
    0.9 experts run at the pass's own rate (None), the A100's 3.12e14 x 0.84 for fp16."""
    for hardware in ("a100-80gb", "l40s"):
        ex, op = _moe_ffn("trt-llm@0.9", weight_dtype="fp16", hardware=hardware)
        assert ex.hw.mma_sync_matrix_fraction == 1.0
        assert op.unit_flops_per_s is None


def test_a_2048_token_mixtral_prefill_on_h100_under_0_9_by_hand():
    """The experts' compute term of one layer of a 2048-token fp16 prefill on one of two H100 SXM
    (tensor parallel: each device holds half of every expert): FLOPs = 2 x 176,160,768 / 2 x 2 (k) x 2048
    = 721,554,505,728 per layer; at 9.894e14 x 0.798 x 0.667 = 5.266240e14 FLOP/s that is 1.37015 ms
    (0.10 on the wgmma GEMM: / 7.895412e14 = 0.91389 ms, 2/3 of it)."""
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.ops import PassShape, layer_ops
    from costmodel.engine.roofline import unit_flops_per_s
    from costmodel.inputs.record import parse_record
    times = {}
    for runtime in ("trt-llm@0.9", "trt-llm@0.10"):
        ex = build_exec(parse_record(dict(model="mixtral-8x7b", hardware="h100-sxm", runtime=runtime, n_devices=2,
                                          batch_size=1, prompt_len=1, gen_len=1, weight_dtype="fp16")))
        op = next(o for o in layer_ops(PassShape(tokens=2048.0, pairs=0.0, kv_hbm_tokens=0.0), ex)
                  if o.name == "moe_ffn")
        assert float(op.flops) == pytest.approx(721_554_505_728, rel=1e-12)
        times[runtime] = float(op.flops) / unit_flops_per_s(op, ex)
    assert times["trt-llm@0.9"] == pytest.approx(1.37015e-3, rel=1e-5)
    assert times["trt-llm@0.10"] == pytest.approx(0.91389e-3, rel=1e-5)


def test_fp16_engines_and_dense_models_are_unchanged_by_the_fp8_moe_attribute():
    """An fp16 engine keeps its experts in fp16 in every version (A100 rows of the v0.9.0 tables)."""
    _, a = _moe_ffn("trt-llm@0.9", weight_dtype="fp16", hardware="a100-80gb")
    _, b = _moe_ffn("trt-llm@0.10", weight_dtype="fp16", hardware="a100-80gb")
    assert (float(a.flops), float(a.hbm_bytes), a.unit_flops_per_s) == (float(b.flops), float(b.hbm_bytes), None)
