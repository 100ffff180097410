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


# ------------------------------------------------------------------ per-request acceptance under load

BASE = {"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm"}
# a two-node chain tree (node 2 under node 1): τ(α) = 1 + p_1 + p_1² = 1 + α + α² under the rank model
CHAIN_TREE = dict(BASE, strategy="tree", draft_model="eagle", tree_parents="0,1")


def test_tree_tokens_for_alphas_by_hand():
    import numpy as np
    from costmodel.engine.strategies.tree import ALPHA_GRID_POINTS, tree_tokens_for_alphas
    from costmodel.engine.tree import validate_parents
    tr = validate_parents((0, 1))
    # α = 0.5: 1 + .5 + .25 = 1.75; α = 0.8: 1 + .8 + .64 = 2.44
    assert tree_tokens_for_alphas(tr, [0.5, 0.8, 0.5]).tolist() == pytest.approx([1.75, 2.44, 1.75], rel=1e-12)
    # more distinct values than the grid: interpolated, within (1/512)²/8 · τ'' (= 2) of the exact value
    a = np.random.default_rng(3).uniform(0, 1, 4 * ALPHA_GRID_POINTS)
    np.testing.assert_allclose(tree_tokens_for_alphas(tr, a), 1 + a + a * a, atol=1e-6)
    # a width-2 tree (two children of the root): 1 + α + α(1 − α) = 1 + 2α − α²; at α = 0.5: 1.75
    assert tree_tokens_for_alphas(validate_parents((0, 0)), [0.5]).tolist() == pytest.approx([1.75])


def test_serving_draws_acceptance_per_request_for_trees():
    from costmodel.serving.api import simulate, split_fields
    rec, w = split_fields(dict(CHAIN_TREE, acceptance_rate=0.6),
                          {"request_rate": 5, "num_requests": 200, "prompt_len": 256, "gen_len": 64,
                           "acceptance_sd": 0.15, "seed": 7})
    _, sim = simulate(rec, w)
    a = sim.alpha
    assert a.std() > 0.1 and abs(a.mean() - 0.6) < 0.03          # Beta(mean 0.6, sd 0.15), seeded
    gc = sim.costs.gamma_costs(1)
    taus = [sim.tau_of(i, gc) for i in range(len(a))]
    assert taus == pytest.approx((1 + a + a * a).tolist(), rel=1e-9)
    # the same seed draws the same acceptances
    _, again = simulate(rec, w)
    assert (again.alpha == a).all()


def test_tree_tau_only_is_read_as_the_tree_alpha():
    """τ = 1.75 on the two-node chain tree is α = 0.5 (1 + .5 + .25)."""
    from costmodel.serving.stepcost import request_alpha
    rec = parse_record(dict(CHAIN_TREE, batch_size=1, prompt_len=8, mean_accepted_tokens=1.75))
    assert request_alpha(rec) == pytest.approx(0.5, abs=1e-9)
    ranks = parse_record(dict(CHAIN_TREE, batch_size=1, prompt_len=8, rank_acceptance="0.6,0.2"))
    assert request_alpha(ranks) is None                          # a measured rank profile: evaluate's τ


def test_serving_with_acceptance_by_position():
    """τ by position, α = .8, .7, .6: 1 + .8 + .56 + .336 = 2.696 for every request; at low load the
    step is evaluate's."""
    rec = dict(BASE, strategy="speculative", draft_model="eagle", gamma=3, acceptance_by_position="0.8,0.7,0.6")
    e = costmodel.evaluate(dict(rec, batch_size=1, prompt_len=512, gen_len=128))
    assert e["tokens_per_step"] == pytest.approx(2.696, rel=1e-12)
    r = costmodel.serve(rec, request_rate=0.05, num_requests=10, prompt_len=512, gen_len=128)
    assert r["requests_completed"] == 10
    assert r["tpot_s"]["p50"] == pytest.approx(e["time_per_output_token_s"], rel=0.05)


def test_off_rows_report_the_autoregressive_decode_as_verification():
    # at γ = 0 nothing is drafted and the one pass that runs is the AR decode pass
    from costmodel.engine.evaluate import evaluate_passes
    off = costmodel.evaluate(dict(SPEC, batch_size=100, gamma_schedule=SCHED))
    ar = dict(SPEC, batch_size=100, strategy="autoregressive", draft_model=None, acceptance_rate=None)
    assert off["verify_time_s"] == float(evaluate_passes(ar)["decode"].cost.time_s)
    assert off["draft_time_per_step_s"] == 0.0


def test_sweep_over_on_and_off_rows_keeps_each_rows_work():
    # B = 16 (γ 4), 32 (γ 2), 100 (γ 0) in one array: every per-step figure of each row is that row's own
    cols = ("step_latency_s", "flops_per_step", "hbm_bytes_per_step", "verify_time_s", "draft_time_per_step_s",
            "tokens_per_step")
    df = costmodel.sweep(dict(SPEC, batch_size=1, gamma_schedule=SCHED), batch_size=[16, 32, 100])
    for _, row in df.iterrows():
        e = costmodel.evaluate(dict(SPEC, batch_size=int(row["batch_size"]), gamma_schedule=SCHED))
        for c in cols + tuple(k for k in e if k.startswith("time_") and k.endswith("_s")):
            assert row[c] == pytest.approx(e[c], rel=1e-12), c


def test_off_rows_hold_the_draft_at_the_smallest_positive_gamma():
    # "1-8:1,9-16:3,17-:0" at B = 17: the memory of the speculative deployment at γ = 1 (the smallest
    # positive γ, though γ = 1 is also the fill value when the schedule has none)
    off = costmodel.evaluate(dict(SPEC, batch_size=17, gamma_schedule="1-8:1,9-16:3,17-:0"))
    at1 = costmodel.evaluate(dict(SPEC, batch_size=17, gamma=1))
    at3 = costmodel.evaluate(dict(SPEC, batch_size=17, gamma=3))
    assert at1["peak_device_memory_bytes"] < at3["peak_device_memory_bytes"]
    assert off["peak_device_memory_bytes"] == at1["peak_device_memory_bytes"]
    # a schedule that never speculates holds the draft at γ = 1
    never = costmodel.evaluate(dict(SPEC, batch_size=4, gamma_schedule="1-:0"))
    assert never["peak_device_memory_bytes"] == costmodel.evaluate(dict(SPEC, batch_size=4, gamma=1))[
        "peak_device_memory_bytes"]
    assert never["tokens_per_step"] == 1.0
    # a γ = 1 row speculates: its speedup is the γ = 1 deployment's, not the off rows' 1
    on = costmodel.evaluate(dict(SPEC, batch_size=1, gamma_schedule="1-8:1,9-16:3,17-:0"))
    assert on["speedup_vs_ar"] == costmodel.evaluate(dict(SPEC, batch_size=1, gamma=1))["speedup_vs_ar"] != 1.0


def test_schedule_note_says_how_tau_is_read():
    tau_only = dict(SPEC, batch_size=1, acceptance_rate=None, mean_accepted_tokens=1.9375, gamma_schedule=SCHED)
    (note,) = [n for n in costmodel.evaluate(tau_only)["notes"] if n.startswith("gamma_schedule")]
    assert note.endswith("; τ is read as the α that gives it at gamma=4")
    # α given: nothing to read
    (note,) = [n for n in costmodel.evaluate(dict(SPEC, batch_size=1, gamma_schedule=SCHED))["notes"]
               if n.startswith("gamma_schedule")]
    assert "τ is read" not in note
    # a tree given τ only reads it against its own shape (its rank model), not at a chain's γ
    tree = dict(tau_only, strategy="tree", tree_shape="full", tree_width=2, tree_depth=3)
    (note,) = [n for n in costmodel.evaluate(tree)["notes"] if n.startswith("gamma_schedule")]
    assert "τ is read" not in note


def test_passes_of_an_off_row_are_the_deployments_prefills_and_the_ar_decode():
    from costmodel.engine.evaluate import evaluate_passes
    p = evaluate_passes(dict(SPEC, batch_size=100, gamma_schedule=SCHED))
    ar = evaluate_passes(dict(SPEC, batch_size=100, strategy="autoregressive", draft_model=None, acceptance_rate=None))
    spec = evaluate_passes(dict(SPEC, batch_size=100, gamma=2))
    # no draft or verification pass ran; the target's and the draft model's prefills are the deployment's
    assert set(p) == {"prefill", "draft_prefill", "decode", "ar_decode"}
    assert float(p["decode"].cost.time_s) == float(ar["decode"].cost.time_s)
    assert float(p["prefill"].cost.time_s) == float(spec["prefill"].cost.time_s)
    assert float(p["draft_prefill"].cost.time_s) == float(spec["draft_prefill"].cost.time_s)
