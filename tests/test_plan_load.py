"""Planning under load: plan / recommend with request_rate and SLOs (costmodel.analysis.plan_load)."""

import json
import math
import re

import pytest

import costmodel
from costmodel.analysis.plan_load import GAMMA_MAX
from costmodel.cli.main import main
from costmodel.serving import api

A100 = {"model": "llama-2-7b", "hardware": "a100-80gb", "runtime": "vllm"}
N = 300          # requests per simulated run: small for test speed


def test_replicas_are_rate_over_max_rate_per_replica():
    wl = dict(prompt_len=256, gen_len=128, slo_ttft_s=5.0, slo_tpot_s=0.03, num_requests=N)
    one = api.max_rate(dict(A100, n_devices=1), **wl)["max_request_rate"]   # serving.search itself
    rate = 2.5 * one
    out = costmodel.plan(dict(A100, n_devices=1, request_rate=rate, **wl))
    assert out["max_rate_per_replica"] == pytest.approx(one)
    # 2.5 r* needs ceil(2.5) = 3 replicas of one device each; the whole deployment is simulated
    # at the full rate and meets the SLOs (a replica more only if it did not)
    assert out["verified"]["meets_slo"] is True
    assert out["replicas"] in (3, 4) and out["n_devices_total"] == out["replicas"] * 1
    assert out["strategy"] == "autoregressive" and out["tensor_parallel"] == 1
    assert out["binding_constraint"] == "tpot"


def test_device_search_skips_what_does_not_fit():
    # llama-2-70b in fp16: 69e9 params × 2 B = 138 GB of weights > 80 GB on one H100 → TP 1 cannot
    # hold a KV cache; TP 2 is the smallest replica
    out = costmodel.plan({"model": "llama-2-70b", "hardware": "h100-sxm", "runtime": "vllm", "prompt_len": 512,
                          "gen_len": 64, "request_rate": 1.0, "slo_ttft_s": 3.0, "slo_tpot_s": 0.1,
                          "num_requests": N, "max_devices": 4})
    tp1 = [c for c in out["candidates"] if c["tensor_parallel"] == 1]
    assert tp1 and tp1[0]["binding_constraint"] == "memory_capacity"
    assert out["tensor_parallel"] == 2 and out["replicas"] == 1 and out["n_devices_total"] == 2
    assert "TP 1" in out["reason"] and "memory_capacity" in out["reason"]


def _pct(text, what):
    return float(re.search(rf"(\d+)% of a step", text).group(1)) / 100 if what else None


@pytest.mark.parametrize("fields,wl,expected", [
    # long prompts, 16 tokens out, a loose TPOT: prefill saturates and TTFT queues, KV to spare
    (A100, dict(prompt_len=2048, gen_len=16, slo_ttft_s=1.0, slo_tpot_s=1.0), "ttft_queueing"),
    # 4000-token requests on a 24 GB A10G (about 14 k KV tokens: 3 requests): preemptions
    (dict(A100, hardware="a10g"), dict(prompt_len=3000, gen_len=1000, slo_ttft_s=5.0, slo_tpot_s=1.0),
     "kv_capacity"),
    (A100, dict(prompt_len=256, gen_len=128, slo_ttft_s=5.0, slo_tpot_s=0.03), "tpot"),
    # a TinyLlama draft on its own device at γ = 6 takes a large share of every step
    (dict(A100, strategy="speculative", draft_model="tinyllama-1.1b", gamma=6, acceptance_rate=0.6,
          draft_placement="separate_device"), dict(prompt_len=256, gen_len=128, slo_ttft_s=5.0, slo_tpot_s=0.02),
     "draft"),
    # TP 8 over PCIe on RTX 4090s: the all-reduces dominate a step
    (dict(A100, model="llama-2-13b", hardware="rtx-4090", n_devices=8),
     dict(prompt_len=256, gen_len=128, slo_ttft_s=5.0, slo_tpot_s=0.04), "interconnect"),
])
def test_binding_constraint_in_words_that_match_the_numbers(fields, wl, expected):
    fields = dict({"n_devices": 1}, **fields)            # one replica's parallelism fixed
    out = costmodel.plan(dict(fields, request_rate=0.02, num_requests=N, **wl))
    row = out if out.get("binding_constraint") == expected else None
    assert row is not None, (out.get("binding_constraint"), out.get("detail"))
    d = row["detail"]
    if expected in ("ttft_queueing", "kv_capacity"):
        m = re.search(r"p99 TTFT ([\d.]+) s > ([\d.]+) s", d)
        assert float(m.group(1)) > float(m.group(2)) == wl["slo_ttft_s"]
    else:
        m = re.search(r"p99 TPOT ([\d.]+) ms > ([\d.]+) ms", d)
        assert float(m.group(1)) > float(m.group(2)) == wl["slo_tpot_s"] * 1e3
    if expected == "kv_capacity":
        assert int(re.search(r"(\d+) preemptions", d).group(1)) > 0 or \
            int(re.search(r"KV cache (\d+)% full", d).group(1)) >= 90
    if expected in ("draft", "interconnect"):
        # the share quoted is evaluate's, at the batch quoted
        batch = int(re.search(r"with (\d+) sequences per step", d).group(1))
        ev = costmodel.evaluate(dict(fields, batch_size=max(batch, 1), prompt_len=wl["prompt_len"],
                                     gen_len=wl["gen_len"]))
        part = ev["draft_time_per_step_s"] if expected == "draft" else ev["time_interconnect_s"]
        assert _pct(d, expected) == pytest.approx(part / ev["step_latency_s"], abs=0.006)
        assert part / ev["step_latency_s"] >= 0.3


def test_infeasible_at_any_load_names_the_single_stream_tpot():
    # llama-2-7b on one A100: a decode step reads 13.5 GB of weights at 2.04 TB/s ≈ 6.6 ms before
    # any overhead, so a 5 ms TPOT cannot be met even by one sequence alone
    ev = costmodel.evaluate(dict(A100, batch_size=1, prompt_len=256, gen_len=128))
    assert ev["time_per_output_token_s"] > 0.005
    out = costmodel.plan(dict(A100, n_devices=1, prompt_len=256, gen_len=128, request_rate=1.0,
                              slo_ttft_s=5.0, slo_tpot_s=0.005, num_requests=N))
    assert out["feasible"] is False and out["binding_constraint"] == "tpot"
    assert "one sequence alone" in out["reason"]


def test_gamma_tuned_and_draft_placement_considered():
    out = costmodel.plan(dict(A100, n_devices=1, strategy="speculative", draft_model="tinyllama-1.1b",
                              acceptance_rate=0.8, prompt_len=256, gen_len=128, request_rate=2.0, slo_ttft_s=5.0,
                              slo_tpot_s=0.03, num_requests=N))
    spec = [c for c in out["candidates"] if c["strategy"] == "speculative"]
    assert {c["draft_placement"] for c in spec} == {"same_device", "separate_device"}
    for c in spec:
        tried = c["gammas_tried"]
        gs = sorted(tried)
        assert gs[0] == 1 and gs == list(range(1, len(gs) + 1))
        # γ grows while r* does not fall; the search stops at the first fall (or at the largest γ)
        assert len(gs) == GAMMA_MAX or tried[gs[-1]] < tried[gs[-2]]
        assert c["gamma"] == max(tried, key=lambda g: (tried[g], -g))
    # a draft on its own device is one more device per replica
    sep = [c for c in spec if c["draft_placement"] == "separate_device"][0]
    assert sep["devices_per_replica"] == 2


def test_recommend_under_load_compares_families():
    out = costmodel.recommend(dict(A100, n_devices=1, prompt_len=256, gen_len=128, request_rate=2.0,
                                   slo_ttft_s=5.0, slo_tpot_s=0.03, acceptance_rate=0.8, draft_model="tinyllama-1.1b",
                                   num_requests=N))
    fams = {c["strategy"] for c in out["candidates"]}
    assert fams == {"autoregressive", "speculative", "tree"}
    best = out["candidates"][0]
    assert out["recommended"] == best["strategy"]
    # the winner needs no more devices than any other family
    assert all(best["n_devices_total"] <= (c["n_devices_total"] or math.inf) for c in out["candidates"])


@pytest.mark.parametrize("extra,field", [
    ({}, "slo_ttft_s"),                                           # a rate without SLOs
    ({"slo_tpot_s": 0.03, "target_ttft_s": 1.0}, "target_ttft_s"),
    ({"slo_tpot_s": 0.03, "replicas": 2}, "replicas"),
])
def test_input_errors(extra, field):
    with pytest.raises(costmodel.InputError) as e:
        costmodel.plan(dict(A100, prompt_len=256, request_rate=2.0, **extra))
    assert e.value.field == field


def test_bad_rate():
    with pytest.raises(costmodel.InputError) as e:
        costmodel.plan(dict(A100, prompt_len=256, request_rate=0, slo_tpot_s=0.03))
    assert e.value.field == "request_rate"


def test_cli_plan_and_recommend_under_load(capsys):
    args = ["model=llama-2-7b", "hardware=a100-80gb", "runtime=vllm", "n_devices=1", "prompt_len=256",
            "gen_len=64", "request_rate=3", "slo_ttft_s=2", "slo_tpot_s=0.05", f"num_requests={N}"]
    assert main(["plan", *args]) == 0
    text = capsys.readouterr().out
    assert "replicas" in text and "bound by" in text
    assert main(["plan", *args, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replicas"] >= 1 and out["binding_constraint"]
    assert main(["recommend", *args, "acceptance_rate=0.7"]) == 0
    assert "recommended:" in capsys.readouterr().out
