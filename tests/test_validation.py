"""costmodel validate: the validation data, the command, the calibration and its held-out guard.

The held-out run (leave-one-source-out refits) takes a few seconds and is shared by the tests below.
"""

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

import costmodel
from costmodel.calibration import calibrate, fit_files, report
from costmodel.cli.main import main
from costmodel.errors import InputError
from costmodel.calibration.validate import (VALIDATION_DIR, default_paths, load_measurements, parse_measurement, predict, summarize, validate)

ROOT = Path(__file__).resolve().parent.parent
CSV = VALIDATION_DIR / "measurements.csv"

# Regression guard on the leave-one-table-out errors: the goals first set for them (10 % / 30 % /
# 80 %) and, for the share within 25 %, a little below what the model reaches
# today. History (median / p90 / within 25 %, validation/REPORT.md): 12.8 / 36.2 / 72.7 at the start
# of 2026-11-30; 12.3 / 35.6 / 73.7 with the runtimes' quantised weight formats and the auto all-reduce;
# 11.3 / 33.7 / 79.8 with the per-step host work of speculation; 11.2 / 32.1 / 81.8 with the per-SM
# bandwidth cap; 83.8 % within 25 % once the served-stream rows stopped calibrating; 9.9 / 29.2 / 85.9
# with the GEMM overlap (√(c² + m²)) near the ridge.
# Leave-one-table-out: 9.1 / 29.2 / 86.9 with a fitted per-step speculation cost and kernels_per_pass;
# 9.3 / 30.7 / 82.8 with both counted from the code instead (the less strict protocol loses a little
# of what the fit absorbed; the headline below gains far more).
# With the never-seen serving rows (measurements_serving.csv) in the default data: 16.1 / 48.9 / 68.8 on
# 276 rows (fp8 KV cache and the fp8 GEMM fraction in); 16.2 / 48.3 / 67.9 on 287 with the vLLM EAGLE chains
# (reported, not fitted) and the audit fixes; 15.2 / 45.1 / 71.8 on 287 with the trt-llm engine versions;
# 15.2 / 44.5 / 71.8 with fp8 MoE experts weight-only before TensorRT-LLM 0.10; 16.7 / 50.0 / 66.6 on
# 293 rows with six new rows (vLLM static-batch latency on NVIDIA GPUs: A100 and T4 from vLLM PR 2192,
# fitted; H200 from the vLLM CI benchmark, reported only), which the vllm profile, fitted mostly on
# MI300X rows whose all-reduces are priced as NCCL, misses by 10-40 %; 13.8 / 45.6 / 73.0 with vLLM's
# custom all-reduce selected and its per-step host work growing with the worker ranks; 13.8 / 42.6 / 72.7
# with TensorRT-LLM 0.9's Ampere (mma.sync) MoE GEMMs at 2/3 of the Hopper peak (the Hopper Mixtral rows).
# Each guard sits within ~1 percentage point of the value measured today (13.8 / 42.6 / 72.7), so a
# regression fails: tighten them when the model improves, never loosen them to let a change pass.
# 12.5 / 42.6 / 74.4 with the token-tree methods' unfused research-code attention counted; 11.5 / 38.7 / 76.1
# with TensorRT-LLM 0.7-0.9's XQA kernel only for 8 query heads per KV head (Mistral-7B and Mixtral decode
# with masked MHA, one KV read per query head); 12.2 / 35.0 / 78.2 with the vLLM V0 entries' own step
# overhead (V0 rows no longer teach the V1 profile one). 12.4 / 34.5 / 81.2 with NCCL's ring and tree at the
# links' measured all-reduce bus bandwidth (nccl-tests busbw, not the datasheet rate). 10.9 / 32.9 / 81.2 with
# the MI300X's per-kernel gap measured on an MI300X (4.5 us launch-plus-cleanup, not the MI210's 2 us).
GUARD = {"median_abs_rel_error": 0.115, "p90_abs_rel_error": 0.34, "within_25pct": 0.80}
# Leave-one-publication-out (the headline): 18.1 / 81.6 / 56.6 before physical bounds; 18.2 / 82.9 / 57.6
# with every efficiency <= 1; 14.7 / 50.5 / 69.7 with the speculation host work counted and unseen
# parameters kept at their priors.
# With the serving rows (276 rows): 21.5 / 49.9 / 59 without their fp8 KV cache; 18.9 / 49.7 / 61 with
# it; 18.3 / 48.3 / 64.5 with fp8 GEMMs at their measured fraction (the project's own 99 rows: 15.9 / 41.4);
# 19.8 / 50.2 / 60.1 on 288 rows once the 12 vLLM EAGLE-1/EAGLE-3 chain rows joined and calibrated vllm
# (batch-1 TPOT on an inferred H100, predicted ~33 % too fast, against the MI300X rows of the same
# runtime); 18.8 / 47.6 / 63.1 on 287 with those rows reported but not fitted (GPU not named in the
# source) and the audit fixes (one Llama-2-70B row past its context left out); 17.5 / 47.5 / 65.5 with
# the trt-llm engine versions; 16.9 / 44.6 / 65.5 with fp8 MoE experts weight-only before TensorRT-LLM
# 0.10; 16.7 / 44.6 / 65.5 with the MI300X vLLM latency rows on the fp16 KV cache their command line
# implies; 18.9 / 50.7 / 60.4 on 293 rows with six vLLM rows on NVIDIA GPUs (A100/T4 from vLLM PR 2192,
# calibrating vllm; H200 from the vLLM CI benchmark, reported only): held out, the MI300X publication is
# now predicted from the PR 2192 and A10G rows, and its NCCL-priced all-reduces come out 34 % (median)
# too slow (vllm runtime 22.5 / 45.1 / 54.2 -> 32.5 / 86.4 / 27.8); 16.2 / 45.6 / 66.9 with the vllm
# profile on vLLM's custom all-reduce (the kernel vLLM runs on NVLink and the MI300X mesh) and its
# per-step host work growing with the worker ranks (0 + 0.47 ms per rank beyond the first, fitted):
# vllm runtime 11.8 / 48.8 / 63.0, the MI300X publication 12.9 % median held out. Guards within
# ~1 point of today's values; 16.1 / 43.7 / 66.9 with TensorRT-LLM 0.9's Ampere (mma.sync) MoE GEMMs at
# 2/3 of the Hopper peak (Hopper Mixtral rows +118 % -> +64 % at worst). Guards within ~1 point of
# today's values (16.1 / 43.7 / 66.9). 13.5 / 41.8 / 70.6 with the token-tree methods' research code
# attending unfused over the tree mask (7 kernels per layer and materialised scores where HF decoding
# runs one SDPA kernel): Spec-Bench held out 23.3 / 46.8 -> 9.7 / 26.9 %, median signed +23.3 -> +9.2 %.
# 12.2 / 39.4 / 73.4 with TensorRT-LLM 0.7-0.9's XQA kernel only for 8 query heads per KV head (Mistral-7B
# and Mixtral decode with masked MHA, one KV read per query head; trt-llm refit 0.946 bandwidth, 3.99 ms
# step): the TensorRT-LLM 0.9 performance tables 18.8 / 44.2 / 59.4 -> 16.2 / 38.4 / 65.6, Mistral +19 %
# -> -13 % median signed. Guards within ~1 point of today's values (12.2 / 39.4 / 73.4).
# 13.2 / 36.5 / 75.4 with the vLLM V0 entries' own step overhead (0; their host work is the version's
# sourced host_step_s + host_per_seq_s): held out, the MI300X publication is no longer fitted to a 7 ms
# V1 step learned from four 2023 V0 rows (its 70B batch <= 16 rows +40...+60 % -> about -20 %), and the
# never-seen rows go 14.0 / 42.2 / 69.6 -> 14.6 / 37.1 / 73.2. A deliberate trade, the one time a guard
# moved up: the median guard 13.2 -> 13.3 (measured 13.20 %) against p90 40.4 -> 37.5 and within-25 %
# 72.4 -> 74.5; see validation/README.md ("The V0 entries set their own step_overhead_s").
# 12.6 / 36.0 / 75.8 with the A100's GEMM fraction taken at a prefill-sized shape (0.84, not the best
# shape's 0.939) and TensorRT-LLM 0.9's fp8 engines attending in fp16: the TTFT rows 19.0 / 35.1 / 62.5
# -> 14.3 / 34.9 / 65.6. Guards tightened to within ~1 point (leave-one-table-out: 12.4 / 34.8 / 78.5).
# 12.5 / 35.0 / 78.2 with NCCL's ring and tree at the links' measured all-reduce bus bandwidth
# (collective_bandwidth_bytes_per_s: 231.6 of 300 GB/s on A100, ~370 of 450 on H100, 22 of 31.5 on PCIe 4.0):
# the tensor-parallel Llama-2-70B rows on 4×L40S +41…+49 % -> +22…+33 % tokens/s, their TTFT −33…−35 % ->
# −19…−20 %; never-seen rows 14.1 / 37.2 / 73.2 -> 13.8 / 35.4 / 76.8. Guards tightened to within ~1 point.
# 11.2 / 34.9 / 78.2 with the MI300X's per-kernel gap measured on an MI300X (Kog AI: 4.5 us launch-plus-cleanup
# per kernel; 4.30 us in a hipGraph) instead of the MI210 proxy (1.97 us): the held-out MI300X vLLM rows
# -19.3 % -> -2.4 % (median signed), vLLM's per-rank host work 0.47 -> 0.22 ms and its bandwidth fraction
# 0.747 -> 0.791; never-seen rows 12.1 / 35.1 / 76.8. Both goals met. Guards tightened.
LOPO_GUARD = {"median_abs_rel_error": 0.12, "p90_abs_rel_error": 0.355, "within_25pct": 0.77}


# fixtures `measurements`, `loso` (leave-one-table-out) and `lopo` (leave-one-publication-out):
# conftest.py (shared with test_readme.py)


def test_every_row_parses_and_evaluates(measurements):
    raw = []
    for path in default_paths():        # measurements.csv and measurements_serving.csv
        with path.open(newline="", encoding="utf-8") as f:
            raw += list(csv.DictReader(f))
    assert len(measurements) == len(raw) >= 200
    res = validate(measurements)
    assert len(res["rows"]) == len(raw)
    for r in res["rows"]:
        if r["rel_error"] is None:
            assert r["metric"] == "fits"
        else:
            assert r["predicted"] > 0 and abs(r["rel_error"]) < 10, r
    for m in measurements:   # every row keeps its source and reliability
        assert m.source and m.reliability, m.id


def test_rows_map_metrics_to_output_keys(measurements):
    keys = set(costmodel.OUTPUT_KEYS) | {"kv_bytes_per_token"}
    assert {m.metric for m in measurements} <= keys
    by_id = {m.id: m for m in measurements}
    # ms -> s, GiB -> bytes
    assert by_id["VP215"].metric == "time_per_output_token_s" and by_id["VP215"].value == pytest.approx(0.03389)
    assert by_id["VP234"].value == pytest.approx(12.63 * 2 ** 30, rel=1e-3)
    assert by_id["KV001"].value == 512 * 1024
    # speedups use each paper's own baseline runtime
    assert by_id["VP007"].runtime == "eager" and by_id["VP159"].runtime == "compiled"


def test_json_output_shape(capsys):
    assert main(["validate", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"rows", "summary"}
    row = out["rows"][0]
    assert set(row) >= {"id", "metric", "measured", "predicted", "rel_error"}
    s = out["summary"]
    assert set(s) >= {"n", "median_abs_rel_error", "p90_abs_rel_error", "within_25pct", "by_metric",
                      "by_strategy", "by_hardware", "by_runtime"}


def test_table_output_groups(capsys):
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    for word in ("metric: speedup_vs_ar", "strategy: tree", "hardware: a100-80gb", "runtime: eager"):
        assert word in out


def test_any_csv_with_record_columns(tmp_path, capsys):
    p = tmp_path / "mine.csv"
    p.write_text("id,model,hardware,batch_size,prompt_len,metric,value,source,framework\n"
                 "a,llama-2-7b,a100-80gb,1,128,ms_per_token,10,me,gpt-fast\n"
                 "b,llama-2-7b,a100-80gb,1,128,memory_gb,14,me,gpt-fast\n"
                 "c,llama-2-7b,t4,1,128,oom_observed,1,me,hf\n")
    res = costmodel.validate([p])
    a, b, c = res["rows"]
    assert a["metric"] == "time_per_output_token_s" and a["measured"] == pytest.approx(0.010)
    assert b["metric"] == "peak_device_memory_bytes" and b["measured"] == pytest.approx(14 * 2 ** 30)
    assert c["metric"] == "fits" and c["measured"] is False and "agree" in c
    assert res["summary"]["n"] == 2 and res["summary"]["categorical"]["n"] == 1
    assert main(["validate", str(p), "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("id,metric,measured,predicted,rel_error")


def test_bad_rows_are_input_errors(tmp_path, capsys):
    p = tmp_path / "bad.csv"
    p.write_text("id,model,hardware,batch_size,prompt_len,metric,value,sauce\n"
                 "a,llama-2-7b,a100-80gb,1,128,tokens_per_s,10,x\n")
    with pytest.raises(InputError, match=r"bad.csv:2.*sauce"):
        load_measurements([p])
    assert main(["validate", str(p)]) == 2
    assert "bad.csv:2" in capsys.readouterr().err
    with pytest.raises(InputError, match="unknown metric"):
        parse_measurement({"model": "llama-2-7b", "hardware": "t4", "batch_size": 1, "prompt_len": 1,
                           "metric": "tokens_per_fortnight", "value": 1})
    with pytest.raises(InputError, match="must be a number"):
        parse_measurement({"model": "llama-2-7b", "hardware": "t4", "batch_size": 1, "prompt_len": 1,
                           "metric": "tokens_per_s", "value": "fast"})
    assert main(["validate", str(tmp_path / "missing.csv")]) == 2


def test_folds_never_see_their_own_rows(loso, measurements):
    groups = {m.id: m.group for m in measurements}
    for fold in loso["folds"]:
        held = {i for i, g in groups.items() if g == fold["held_out"]}
        for rt, fit in fold["refitted"].items():
            assert not held & set(fit["rows"]), (fold["held_out"], rt)
    assert {r["fold"] for r in loso["rows"]} == set(groups.values())


def test_held_out_error_regression_guard(loso):
    s = summarize(loso["rows"])
    assert s["n"] >= 90
    assert s["median_abs_rel_error"] <= GUARD["median_abs_rel_error"]
    assert s["p90_abs_rel_error"] <= GUARD["p90_abs_rel_error"]
    assert s["within_25pct"] >= GUARD["within_25pct"]


def test_leave_one_publication_out_is_the_default_and_regression_guarded(lopo, measurements):
    assert lopo["by"] == "publication"
    pubs = {m.id: m.publication for m in measurements}
    # Spec-Bench's two leaderboards (RTX 3090, A100) are one publication: one fold
    assert pubs["VP001"] == pubs["VP020"] == "spec-bench"
    for fold in lopo["folds"]:
        held = {i for i, p in pubs.items() if p == fold["held_out"]}
        for rt, fit in fold["refitted"].items():
            assert not held & set(fit["rows"]), (fold["held_out"], rt)
    s = summarize(lopo["rows"])
    assert s["median_abs_rel_error"] <= LOPO_GUARD["median_abs_rel_error"]
    assert s["p90_abs_rel_error"] <= LOPO_GUARD["p90_abs_rel_error"]
    assert s["within_25pct"] >= LOPO_GUARD["within_25pct"]


def test_error_band_by_metric_and_regime():
    """The claim checker takes the band of the claim's metric in its regime when that has >= 5 rows:
    batch 1 is judged with the batch-1 latency rows' p90, batch 64 with the batched rows' p90."""
    from costmodel.analysis.claims import load_error_band
    band = load_error_band({"overall": {"n": 50, "p90_abs_rel_error": 0.3},
                            "by_metric": {"tokens_per_s": {"n": 20, "p90_abs_rel_error": 0.2}},
                            "by_metric_regime": {"tokens_per_s": {
                                "batch1_latency": {"n": 8, "p90_abs_rel_error": 0.1},
                                "batched_throughput": {"n": 3, "p90_abs_rel_error": 0.9}}}})
    assert band.for_metric("tokens_per_s", 1)[0] == 0.1
    assert band.for_metric("tokens_per_s", 64)[0] == 0.2      # only 3 batched rows: the metric's band
    assert band.for_metric("ttft_s", 1)[0] == 0.3


def test_runtime_yamls_carry_the_fit_with_provenance():
    cal = yaml.safe_load((VALIDATION_DIR / "calibration.yaml").read_text())
    for rt, entry in cal["fitted"].items():
        data = yaml.safe_load((ROOT / "runtimes" / f"{rt}.yaml").read_text())
        for name, value in entry["params"].items():
            assert data[name]["value"] == pytest.approx(value, rel=1e-3, abs=1e-9), (rt, name)
            assert data[name]["source"].startswith("fitted by costmodel validate --fit on validation/"), (rt, name)
            assert re.search(r"\d{4}-\d\d-\d\d, \d+ rows", data[name]["source"])
    for name in ("calibration.yaml", "REPORT.md", "error_band.yaml"):    # no absolute machine paths
        assert not re.search(r"(^|[\s'\"(])/[A-Za-z]", (VALIDATION_DIR / name).read_text()), name


def test_fit_reproduces_the_written_values(loso):
    """The committed runtime values are the all-rows fit of the current model and data: rerun
    `costmodel validate --fit --report` after changing either."""
    cal = yaml.safe_load((VALIDATION_DIR / "calibration.yaml").read_text())
    for rt, entry in cal["fitted"].items():
        for name, value in entry["params"].items():
            lo, hi, scale = calibrate.BOUNDS[name]
            assert loso["full_fit"][rt]["params"][name] == pytest.approx(value, rel=0.05, abs=0.02 * scale), \
                (rt, name)


def test_error_band_file_shape():
    band = yaml.safe_load((VALIDATION_DIR / "error_band.yaml").read_text())
    assert set(band) == {"source", "overall", "by_metric", "by_metric_regime"}
    assert "leave-one-publication-out held-out" in band["source"]
    assert set(band["overall"]) == {"n", "median_abs_rel_error", "p90_abs_rel_error", "within_25pct"}
    regimes = [x for d in band["by_metric_regime"].values() for x in d.values()]
    for s in [*band["by_metric"].values(), *regimes]:
        assert set(s) == {"n", "median_abs_rel_error", "p90_abs_rel_error"}
        assert s["n"] > 0 and 0 <= s["median_abs_rel_error"] <= s["p90_abs_rel_error"] + 1e-12
    assert {"speedup_vs_ar", "tokens_per_s_per_seq"} <= set(band["by_metric"])


def test_report_files(loso, measurements, tmp_path):
    written = report.write_report(loso, measurements, tmp_path, files=["validation/measurements.csv"])
    names = {Path(w).name for w in written}
    assert names == {"REPORT.md", report.PLOT_NAME, "error_band.yaml"}
    text = (tmp_path / "REPORT.md").read_text()
    assert "Worst 10 rows" in text and "By strategy" in text and "By hardware" in text
    worst = text.split("## Worst 10 rows")[1].split("##")[0]
    assert worst.count("\n| VP") + worst.count("\n| VS") + worst.count("\n| KV") >= 10
    assert (tmp_path / report.PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    band = yaml.safe_load((tmp_path / "error_band.yaml").read_text())
    assert band["overall"]["n"] == summarize(loso["rows"])["n"]


def test_fit_writes_values_and_provenance(tmp_path, loso):
    rt = tmp_path / "eager.yaml"
    rt.write_text((ROOT / "runtimes" / "eager.yaml").read_text())
    entry = loso["full_fit"]["eager"]
    fit_files.write_runtime_yaml(rt, entry, "validation/measurements.csv", date="2000-01-01")
    data = yaml.safe_load(rt.read_text())
    for name, v in entry["params"].items():
        assert data[name]["value"] == pytest.approx(v, rel=1e-3)
        assert "2000-01-01" in data[name]["source"] and f"{entry['n_rows']} rows" in data[name]["source"]
    costmodel.load_runtime(str(rt))      # still a valid runtime file


def test_fit_evaluates_parameter_vectors_in_one_call(measurements):
    """calibrate.py sweeps runtime parameters as numpy arrays through the engine; a scalar-only engine
    path makes the fit (and this file's tests) ~100x slower. Every row must vectorise and agree."""
    import dataclasses
    import warnings

    import numpy as np
    vals = {"bandwidth_efficiency": np.array([0.7, 1.0]), "step_overhead_s": np.array([0.0, 2e-3]),
            "host_per_kernel_s": np.array([1e-5, 3e-5]), "kernels_per_pass": np.array([10.0, 100.0]),
            "compute_efficiency": np.array([0.3, 1.0])}
    calibrate._WARNED.clear()
    for m in [m for m in measurements if not m.categorical][::7]:
        ev = calibrate._Evaluator(m.runtime, [m])
        ev.names = tuple(vals)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            vec = ev.preds(np.stack(list(vals.values()), axis=1))[0]
        for i in range(2):
            rt = dataclasses.replace(ev.base, **{k: float(v[i]) for k, v in vals.items()})
            assert vec[i] == pytest.approx(predict(m, {m.runtime: rt}), rel=1e-9), m.id


def test_calibrate_no_rows_are_reported_but_not_fitted(measurements):
    """The served-stream rows (llmperf at 4 and 64 users: other requests' prefills inside the measured
    latency) carry calibrate=no: fit_rows leaves them out, validate still predicts them; a bad value of
    the column is an input error naming it."""
    off = {m.id for m in measurements if not m.calibrate}
    # and the vLLM issue #20780 rows (VS170-VS182), whose GPU is inferred, not named, and the vLLM CI
    # H200 rows (VS196-VS198), whose engine version (V0 or V1) is not stated
    assert off == {"VP215", "VP217", "VP220"} | {f"VS{i}" for i in range(170, 183)} | {"VS196", "VS197", "VS198"}
    fitted = {m.id for m in calibrate.fit_rows(measurements)}
    assert not (off & fitted) and "VP218" in fitted
    assert off <= {r["id"] for r in validate()["rows"]}
    row = dict(id="X1", metric="tokens_per_s_per_seq", value="10", model="llama-2-7b", hardware="a100-80gb",
               batch_size="1", prompt_len="8", source="test", calibrate="maybe")
    with pytest.raises(InputError) as e:
        parse_measurement(row)
    assert "calibrate" in str(e.value)


def test_tokens_per_s_e2e_is_generated_tokens_over_the_whole_run():
    """tokens_per_s_e2e = batch · gen_len / (ttft + (gen_len − 1) · step / τ): for batch 4 and 64 generated
    tokens each, 256 tokens over the end-to-end time (prefill included), below the decode-only rate."""
    from costmodel import evaluate
    out = evaluate(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=4, prompt_len=512, gen_len=64))
    e2e = out["ttft_s"] + 63 * out["step_latency_s"]
    assert out["e2e_latency_s"] == pytest.approx(e2e, rel=1e-12)
    assert out["tokens_per_s_e2e"] == pytest.approx(256 / e2e, rel=1e-12)
    assert out["tokens_per_s_e2e"] < out["tokens_per_s"]


def test_serving_columns_and_e2e_metric_accepted(tmp_path):
    p = tmp_path / "serving.csv"
    p.write_text("id,publication,throughput_definition,metric,value,model,hardware,runtime,batch_size,prompt_len,"
                 "gen_len,source\n"
                 "S1,vllm-bench-2024,generated tokens / whole time (prefill included),tokens_per_s_e2e,900,"
                 "llama-2-7b,a100-80gb,vllm,8,128,128,somewhere\n")
    from costmodel.calibration.validate import load_measurements, validate
    ms = load_measurements([p])
    assert ms[0].metric == "tokens_per_s_e2e" and ms[0].publication == "vllm-bench-2024"
    r = validate([p])["rows"][0]
    assert r["predicted"] > 0


def test_every_serving_row_is_validated_or_listed_as_excluded_with_a_reason():
    """VS001-VS192: each one is in measurements_serving.csv (a default file) or in excluded_serving.csv."""
    assert [p.name for p in default_paths()] == ["measurements.csv", "measurements_serving.csv"]
    with (VALIDATION_DIR / "measurements_serving.csv").open(newline="", encoding="utf-8") as f:
        used = {r["id"] for r in csv.DictReader(f)}
    with (VALIDATION_DIR / "excluded_serving.csv").open(newline="", encoding="utf-8") as f:
        left = {r["id"]: r["reason"] for r in csv.DictReader(f)}
    assert not used & set(left)
    assert used | set(left) == {f"VS{i:03d}" for i in range(1, 199)}
    assert all(len(why) > 20 for why in left.values())
    with (VALIDATION_DIR / "measurements_serving.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    # TensorRT-LLM FP8 engines keep an fp8 KV cache; the FP16 A100 ones do not
    for r in rows:
        if r["runtime"] == "trt-llm":
            assert r["kv_dtype"] in (("fp8",) if r["weight_dtype"] == "fp8" else ("", "fp16")), r["id"]


def test_report_rewrite_keeps_the_load_curve_section(tmp_path):
    """`validate --report` rewrites REPORT.md; the section another script wrote between its markers
    (the serving load curves) must survive the rewrite, text unchanged."""
    from costmodel.calibration.report import KEPT_MARKERS
    from costmodel.inputs.outputs import kept_sections
    section = "<!-- load-curves:start -->\n## Load curves\n\n| a | b |\n<!-- load-curves:end -->"
    path = tmp_path / "REPORT.md"
    path.write_text("# Validation report\n\nold body\n\n" + section + "\n", encoding="utf-8")
    assert kept_sections(path, KEPT_MARKERS) == ["", section, ""]
    assert kept_sections(tmp_path / "missing.md", KEPT_MARKERS) == []
    path.write_text("# no markers here\n", encoding="utf-8")
    assert kept_sections(path, KEPT_MARKERS) == []


def test_the_report_reads_the_vllm_fit_in_words():
    """REPORT.md's 'Reading the fitted values' has a vllm line: 0.7906 -> '0.79 of the stream bandwidth',
    2.2283e-4 s -> '0.22 ms per worker rank'."""
    from costmodel.calibration.report import _fitted_notes
    (line,) = _fitted_notes({"vllm": {"bandwidth_efficiency": 0.7906, "step_overhead_s": 0.0,
                                      "step_overhead_per_rank_s": 2.2283e-4}})
    assert line.startswith("- vllm: 0.79 of the stream bandwidth; 0.00 ms of host work per step + 0.22 ms per worker rank")
