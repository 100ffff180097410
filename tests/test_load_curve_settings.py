"""Engine and workload settings the load-curve validation (validation/serve_load_curves.py) gives a row.

ShareGPT rows publish mean lengths; the benchmark sends each sampled conversation's own lengths, so
output lengths are drawn lognormal around the row's mean. The CV comes from the DataCrunch SGLang
ShareGPT records (same sampler): mean / median E2E latency 3201.4826 / 1988.5656 ms = 1.6100 at 4 req/s
and 5302.5507 / 3291.7507 ms = 1.6109 at 8 req/s; a lognormal's mean / median = sqrt(1 + CV²), so
CV = sqrt(1.6100² − 1) = sqrt(1.5921) = 1.2618 ≈ 1.26."""

import math
import os

import pandas as pd
import pytest

HERE = os.path.dirname(__file__)


def _row(**kw):
    base = dict(publication="x-2025", runtime="vllm", runtime_version=float("nan"), notes="",
                dataset="sharegpt", prompt_len=213.0, gen_len=214.0, prompt_len_dist=float("nan"),
                gen_len_dist=float("nan"))
    base.update(kw)
    return pd.Series(base)


def test_sharegpt_output_cv_from_the_mean_over_median_e2e(slc):
    for mean_ms, median_ms in ((3201.4826, 1988.5656), (5302.5507, 3291.7507)):
        ratio = mean_ms / median_ms                          # 1.6100, 1.6109
        assert math.sqrt(ratio ** 2 - 1.0) == pytest.approx(slc.SHAREGPT_OUTPUT_CV, abs=0.005)


def test_sharegpt_rows_draw_lognormal_output_lengths_around_their_mean(slc):
    wl, said = slc.engine_settings(_row())
    assert wl["gen_len_dist"] == "lognormal:214:1.26"
    assert "prompt_len_dist" not in wl                        # prompts stay at their mean
    assert any("lognormal" in s for s in said)


def test_sharegpt_rows_without_lengths_take_the_v060_sample_mean(slc):
    wl, _ = slc.engine_settings(_row(prompt_len=float("nan"), gen_len=float("nan")))
    assert (wl["prompt_len"], wl["gen_len"], wl["gen_len_dist"]) == (202, 179, "lognormal:179:1.26")


@pytest.mark.parametrize("kw", [dict(dataset="random"), dict(gen_len_dist="uniform:1:1024")])
def test_rows_with_their_own_lengths_keep_them(slc, kw):
    wl, _ = slc.engine_settings(_row(**kw))
    assert "gen_len_dist" not in wl


@pytest.mark.parametrize("source, per_request", [
    ("NVIDIA NIM LLM Benchmarking Guide (v1.0.0), 'Performance' page (AIPerf/genai-perf client)", True),
    ("vLLM upstream nightly serving benchmark (benchmark_serving) on Azure", False)])
def test_itl_definition_follows_the_client(slc, source, per_request):
    """AIPerf / genai-perf: mean over requests of (E2E − TTFT) / (output − 1) = the simulator's TPOT;
    benchmark_serving pools all inter-token gaps = the simulator's token-weighted ITL."""
    assert slc.itl_is_per_request(_row(source=source)) is per_request


def test_nim_fp8_rows_need_an_fp8_kv_cache():
    """The NIM table's saturated point: 920 tok/s at ITL 93 ms = 920 × 0.093 = 85.6 sequences decoding,
    each holding >= 5000 tokens: >= 428,000 tokens. Llama-3.3-70B 16-bit KV per token = 80 layers × 8 KV
    heads × 128 × 2 (K, V) × 2 B = 327,680 B; per GPU at TP2 163,840 B; 428,000 × 163,840 B = 70.1 GB,
    beside 70.6e9 / 2 = 35.3 GB of fp8 weights: over an H100's 80 GB. fp8 KV (1 B): 35.1 GB, which fits."""
    from costmodel.inputs.model import load_model
    m = load_model("llama-3.3-70b")
    assert m.kv_bytes_per_token(2) == 80 * 8 * 128 * 2 * 2 == 327_680
    resident = 920.12 * 0.0932 * 5000
    assert resident * 327_680 / 2 / 1e9 + 35.3 > 80.0
    assert resident * 327_680 / 2 / 2 / 1e9 + 35.3 < 80.0
    d = pd.read_csv(os.path.join(HERE, "..", "validation", "load_curves.csv"))
    nim = d[d.publication == "nim-llm-bench-perf"]
    assert len(nim) == 24 and (nim.kv_dtype == "fp8").all()
    assert d[d.publication != "nim-llm-bench-perf"].kv_dtype.isna().all()


def test_excluded_rows_name_real_rows_with_a_reason(slc):
    """Each row of validation/excluded_load_curves.csv is a row of load_curves.csv (same publication and
    metric) and says why; the QPS-inf TTFT rows of the reused Azure server (LC153, LC154) are there."""
    d = pd.read_csv(os.path.join(HERE, "..", "validation", "load_curves.csv")).set_index("id")
    e = pd.read_csv(os.path.join(HERE, "..", "validation", "excluded_load_curves.csv"))
    for _, r in e.iterrows():
        assert (d.loc[r["id"], "publication"], d.loc[r["id"], "metric"]) == (r["publication"], r["metric"])
        assert len(str(r["reason"])) > 40
    assert {"LC153", "LC154"} <= set(slc.excluded_rows())


def test_a_cold_qps_inf_prefill_cannot_give_the_measured_ttft():
    """LC153: 200 prompts, 42,659 tokens, all sent at t = 0, at most 8192 prompt tokens per step:
    ceil(42,659 / 8192) = 6 prefill steps. One 8192-token step of Llama-3.3-70B on 8 A100-40GB (TP8)
    needs 2 × 70.6e9 × 8192 / 8 = 1.446e14 FLOP per GPU, at the A100's 312e12 FLOP/s peak >= 0.46 s.
    The requests of the k-th step see their first token after k steps, so the mean TTFT of a cold start
    is at least 0.46 s × (1 + 2 + … + 6) / 6 = 0.46 × 3.5 = 1.6 s, far above the 0.36 s measured.
    (The row, the model's published size and the device's peak are read from the project's files.)"""
    from costmodel.inputs.hardware import load_hardware
    from costmodel.inputs.model import load_model
    row = pd.read_csv(os.path.join(HERE, "..", "validation", "load_curves.csv")).set_index("id").loc["LC153"]
    assert (row["metric"], row["model"], row["hardware"], int(row["n_devices"])) == \
        ("ttft_s_mean", "llama-3.3-70b", "a100-40gb", 8)
    params, peak = load_model(row["model"]).published_params, load_hardware(row["hardware"]).matrix_peak("fp16")
    assert (params, peak) == (70.6e9, 312e12)
    steps = math.ceil(42_659 / 8192)
    assert steps == 6
    step_s = 2 * params * 8192 / row["n_devices"] / peak
    assert step_s == pytest.approx(0.4635, rel=1e-3)
    assert step_s * sum(range(1, steps + 1)) / steps > 4 * row["value"]
