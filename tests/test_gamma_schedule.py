"""gamma_schedule as a record field: evaluate takes γ for batch_size, serve for each step's batch."""

import math

import pytest

import costmodel
from costmodel.inputs.record import parse_record
from costmodel.inputs.schedule import canonical, gamma_for, gammas_for, parse_gamma_schedule

SPEC = {"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm", "strategy": "speculative",
        "draft_model": "llama-3.2-1b", "gamma": 4, "acceptance_rate": 0.75, "prompt_len": 512, "gen_len": 128}
SCHED = "1-16:4,17-64:2,65-:0"


def test_schedule_text():
    assert parse_gamma_schedule("1-64:3,65-128:1,129-:0") == ((1, 64, 3), (65, 128, 1), (129, math.inf, 0))
    # a closed last range is extended with its own γ; blanks are dropped
    assert canonical("1-64:3, 65-128:1") == "1-64:3,65-128:1,129-:1"
    assert parse_record(dict(SPEC, batch_size=1, gamma_schedule="1-8:2,9-:0")).gamma_schedule == "1-8:2,9-:0"
    s = parse_gamma_schedule(SCHED)
    assert [gamma_for(s, n) for n in (1, 16, 17, 64, 65, 1000)] == [4, 4, 2, 2, 0, 0]
    assert gammas_for(SCHED, [1, 16, 17, 64, 65, 1000]).tolist() == [4, 4, 2, 2, 0, 0]


@pytest.mark.parametrize("fields,needle", [
    ({"strategy": "autoregressive", "draft_model": None, "acceptance_rate": None}, "gamma_schedule"),
    ({"gamma_schedule": "2-8:3"}, "gamma_schedule"),
    ({"gamma_schedule": "1-8:65"}, "gamma_schedule"),
    ({"gamma_schedule": "1-8:x"}, "gamma_schedule"),
    # α_1..α_3 cannot describe the γ = 4 the schedule reaches
    ({"acceptance_rate": None, "acceptance_by_position": "0.8,0.7,0.6", "gamma": 3}, "acceptance_by_position"),
])
def test_bad_schedules(fields, needle):
    rec = dict(SPEC, batch_size=1, gamma_schedule=SCHED)
    rec.update(fields)
    with pytest.raises(costmodel.InputError, match=needle):
        parse_record(rec)


def test_evaluate_takes_gamma_for_batch_size():
    """B = 16 → γ 4, B = 32 → γ 2, B = 100 → plain decoding. Tokens per step at α = 0.75 (Leviathan,
    Σ_{j≤γ} α^j): γ = 4: 1 + .75 + .5625 + .421875 + .31640625 = 3.05078125; γ = 2: 2.3125; γ = 0: 1."""
    for B, g, tau in ((16, 4, 3.05078125), (32, 2, 2.3125)):
        e = costmodel.evaluate(dict(SPEC, batch_size=B, gamma_schedule=SCHED))
        fixed = costmodel.evaluate(dict(SPEC, batch_size=B, gamma=g))
        assert e["scheduled_gamma"] == g
        assert e["tokens_per_step"] == pytest.approx(tau, rel=1e-12)
        assert e["step_latency_s"] == fixed["step_latency_s"]
        assert e["speedup_vs_ar"] == fixed["speedup_vs_ar"]
    off = costmodel.evaluate(dict(SPEC, batch_size=100, gamma_schedule=SCHED))
    ar = costmodel.evaluate(dict(SPEC, batch_size=100, strategy="autoregressive", draft_model=None,
                                 acceptance_rate=None))
    spec = costmodel.evaluate(dict(SPEC, batch_size=100, gamma=2))
    assert off["scheduled_gamma"] == 0 and off["tokens_per_step"] == 1.0 and off["speedup_vs_ar"] == 1.0
    assert off["step_latency_s"] == ar["step_latency_s"]
    assert off["draft_time_per_step_s"] == 0.0
    # the deployment still holds the draft: its prefill and memory (at the smallest positive γ, 2)
    assert off["ttft_s"] == spec["ttft_s"] > ar["ttft_s"]
    assert off["peak_device_memory_bytes"] == spec["peak_device_memory_bytes"]
    assert any("gamma_schedule" in n for n in off["notes"])


def test_tau_only_is_read_as_alpha_at_the_record_gamma():
    """τ = 1.9375 at γ = 4 is α = 0.5 (1 + .5 + .25 + .125 + .0625); at γ = 2 that draft gains
    1 + .5 + .25 = 1.75 tokens per step."""
    rec = dict(SPEC, batch_size=1, acceptance_rate=None, mean_accepted_tokens=1.9375, gamma_schedule="1-8:2,9-:4")
    assert costmodel.evaluate(rec)["tokens_per_step"] == pytest.approx(1.75, rel=1e-9)
    assert costmodel.evaluate(dict(rec, batch_size=9))["tokens_per_step"] == pytest.approx(1.9375, rel=1e-9)


def test_sweep_rows_match_evaluate():
    df = costmodel.sweep(dict(SPEC, batch_size=1, gamma_schedule=SCHED), batch_size=[1, 16, 32, 100])
    for _, row in df.iterrows():
        e = costmodel.evaluate(dict(SPEC, batch_size=int(row["batch_size"]), gamma_schedule=SCHED))
        assert row["scheduled_gamma"] == e["scheduled_gamma"]
        assert row["step_latency_s"] == pytest.approx(e["step_latency_s"], rel=1e-12)
        assert row["speedup_vs_ar"] == pytest.approx(e["speedup_vs_ar"], rel=1e-12)


def test_serve_reads_the_record_schedule_and_agrees_with_evaluate_at_low_load():
    rec = {k: v for k, v in SPEC.items() if k not in ("prompt_len", "gen_len")}
    rec["gamma_schedule"] = "1-4:2,5-:0"
    e = costmodel.evaluate(dict(SPEC, batch_size=1, gamma_schedule="1-4:2,5-:0"))
    r = costmodel.serve(rec, request_rate=0.05, num_requests=10, prompt_len=512, gen_len=128, acceptance_sd=0)
    assert e["scheduled_gamma"] == 2
    assert r["tpot_s"]["p50"] == pytest.approx(e["time_per_output_token_s"], rel=0.05)
    assert r["ttft_s"]["p50"] == pytest.approx(e["ttft_s"], rel=0.05)
    # at saturation (all 300 at once, ≥ 5 running) the same deployment decodes plainly: no faster
    # per token than autoregressive serving
    sat = costmodel.serve(rec, num_requests=300, prompt_len=512, gen_len=128)
    ar = costmodel.serve({k: v for k, v in rec.items() if k not in ("strategy", "draft_model", "gamma",
                                                                      "acceptance_rate", "gamma_schedule")},
                         num_requests=300, prompt_len=512, gen_len=128)
    assert sat["tpot_s"]["p50"] >= 0.95 * ar["tpot_s"]["p50"]
