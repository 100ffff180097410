"""Serving under load: the mixed pass, the simulator's invariants and its physics."""

import math

import numpy as np
import pytest

import costmodel
from costmodel.engine.evaluate import build_exec
from costmodel.engine.mixed import PassTable, chunk_terms, mixed_pass_cost
from costmodel.engine.strategies.common import decode_shape, prefill_shape
from costmodel.engine.pass_cost import pass_cost
from costmodel.inputs.record import parse_record
from costmodel.serving import serve
from costmodel.inputs.schedule import gamma_for, parse_gamma_schedule

AR = {"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm"}
# a draft must share the target's tokenizer: Llama-3.2-1B drafts for Llama-3-8B (128,256 tokens)
SPEC = dict(AR, strategy="speculative", draft_model="llama-3.2-1b", gamma=4, acceptance_rate=0.75)


def test_chunk_terms_by_hand():
    # 100 tokens after 412 cached: pairs 100·412 + 100·101/2 = 41200 + 5050; KV read 412 + 100
    assert chunk_terms(100, 412) == (100, 46250.0, 512)
    # the whole prompt (L0 = 0) is the prefill shape: P(P+1)/2 pairs, P tokens read
    s = prefill_shape(1, 512)
    t, p, kv = chunk_terms(512, 0)
    assert (t, p, kv) == (float(s.tokens), float(s.pairs), float(s.kv_hbm_tokens))


def test_pass_table_equals_pass_cost():
    rng = np.random.default_rng(1)
    for rec in (AR, {"model": "mixtral-8x7b", "hardware": "h100-sxm", "n_devices": 2},
                {"model": "llama-2-7b", "hardware": "t4", "runtime": "eager", "weight_dtype": "int4"}):
        ex = build_exec(parse_record(dict(rec, batch_size=1, prompt_len=8)))
        tab = PassTable(ex, 4096)
        T, lm = rng.integers(1, 4096, 40), rng.integers(1, 256, 40)
        pairs, kv = rng.uniform(0, 1e7, 40), rng.uniform(0, 4e5, 40)
        ref = mixed_pass_cost(ex, T, lm, pairs, kv).time_s
        np.testing.assert_allclose(tab.times(T, lm, pairs, kv), ref, rtol=1e-12)
        assert tab.time(int(T[0]), int(lm[0]), float(pairs[0]), float(kv[0])) == pytest.approx(ref[0], rel=1e-12)
    # a decode-only mixed pass of 8 sequences at context 300 is evaluate's decode pass
    ex = build_exec(parse_record(dict(AR, batch_size=1, prompt_len=8)))
    s = decode_shape(8, 1, 300)
    assert float(mixed_pass_cost(ex, 8, 8, s.pairs, s.kv_hbm_tokens).time_s) == \
        pytest.approx(float(pass_cost(s, ex).time_s), rel=1e-12)


@pytest.mark.parametrize("rec", [AR, SPEC], ids=["ar", "speculative"])
def test_low_load_equals_evaluate(rec):
    e = costmodel.evaluate(dict(rec, batch_size=1, prompt_len=512, gen_len=128))
    r = serve(rec, request_rate=0.05, num_requests=12, prompt_len=512, gen_len=128, acceptance_sd=0)
    assert r["ttft_s"]["p50"] == pytest.approx(e["ttft_s"], rel=0.05)
    assert r["tpot_s"]["p50"] == pytest.approx(e["time_per_output_token_s"], rel=0.05)


def test_conservation_and_littles_law():
    r = serve(AR, request_rate=60, duration_s=20, prompt_len_dist="uniform:100:900", gen_len_dist="lognormal:150:0.6")
    assert r["requests_arrived"] == r["requests_completed"] + r["requests_running"] + r["requests_queued"] \
        + r["requests_rejected"]
    assert r["requests_running"] + r["requests_queued"] > 0          # the window closes mid-stream
    assert abs(r["littles_law"]["rel_error"]) < 0.05
    d = serve(AR, request_rate=30, num_requests=300, prompt_len=1024, gen_len=64,
              prefill_instances=1, decode_instances=2)
    assert d["requests_completed"] == 300 and abs(d["littles_law"]["rel_error"]) < 0.05
    assert d["n_devices_total"] == 3


try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    @settings(max_examples=12, deadline=None)
    @given(rate=st.floats(1, 400), dur=st.floats(0.5, 5), seqs=st.integers(1, 64),
           chunked=st.booleans(), seed=st.integers(0, 1000))
    def test_every_request_accounted_for(rate, dur, seqs, chunked, seed):
        r = serve(AR, request_rate=rate, duration_s=dur, max_num_seqs=seqs, chunked_prefill=chunked, seed=seed,
                  prompt_len_dist="uniform:16:2048", gen_len_dist="uniform:1:300", shared_prompt_len=64)
        assert r["requests_arrived"] == r["requests_completed"] + r["requests_running"] + r["requests_queued"] \
            + r["requests_rejected"]
        assert min(r["requests_running"], r["requests_queued"], r["requests_completed"]) >= 0


def test_p99_ttft_rises_steeply_near_capacity():
    # capacity: the request throughput the engine sustains with its batch full. A burst of requests
    # measures it only while max_num_seqs (256) are running: its last ~256 requests drain with a
    # shrinking batch, which pulls the burst's mean rate below the sustained one, the more so the longer
    # each request lives (128 decode steps). A burst of 600 read ~4 % low once vLLM's decode steps were
    # calibrated to the measured ones (51.1 against 53.0 requests/s sustained), so "1.2x capacity" was
    # only ~1.16x and the 600-request run ended before its queue built up (p99 7x, not 10x); a burst of
    # 2400, where the drain is a tenth of the run, measures the sustained rate. The loads (0.3x, 1.2x)
    # and the 10x are as they were.
    sat = serve(AR, num_requests=2400, prompt_len=512, gen_len=128)
    cap = sat["request_throughput_per_s"]
    lo = serve(AR, request_rate=0.3 * cap, num_requests=600, prompt_len=512, gen_len=128)
    hi = serve(AR, request_rate=1.2 * cap, num_requests=600, prompt_len=512, gen_len=128)
    assert hi["ttft_s"]["p99"] > 10 * lo["ttft_s"]["p99"]


def test_kv_exhaustion_preempts_never_loses():
    r = serve({"model": "llama-2-13b", "hardware": "a100-40gb", "runtime": "vllm"}, num_requests=200,
              prompt_len=1024, gen_len_dist="uniform:200:1500", max_num_seqs=256)
    assert r["preemptions"] > 0 and r["requests_completed"] == 200
    assert r["kv_utilisation_mean"] > 0.5


def test_speculation_under_load():
    speedups, totals = [], {"fixed": 0.0, "schedule": 0.0}
    for rate in (2, 40, 80, 120):
        kw = dict(request_rate=rate, num_requests=600, prompt_len=512, gen_len=128)
        a = serve(AR, **kw)["e2e_s"]["mean"]
        s = serve(SPEC, **kw)["e2e_s"]["mean"]
        g = serve(SPEC, gamma_schedule="1-16:4,17-64:2,65-:0", **kw)["e2e_s"]["mean"]
        speedups.append(a / s)
        totals["fixed"] += s
        totals["schedule"] += g
    assert speedups[0] > 1.5 and speedups[-1] < 1.0            # helps when idle, hurts when saturated
    assert speedups[0] > speedups[1] > speedups[2]             # beyond saturation both only queue
    assert totals["schedule"] < totals["fixed"]


def test_gamma_schedule_parsing():
    s = parse_gamma_schedule("1-64:3,65-128:1,129-:0")
    assert s == ((1, 64, 3), (65, 128, 1), (129, math.inf, 0))
    assert [gamma_for(s, n) for n in (1, 64, 65, 200)] == [3, 3, 1, 0]


@pytest.mark.parametrize("field,value,needle", [
    ("request_rate", "-1", "request_rate"), ("prompt_len_dist", "normal:3", "prompt_len_dist"),
    ("gamma_schedule", "2-8:3", "gamma_schedule"), ("arrival", "weibull", "arrival"),
    ("max_num_seqs", "0", "max_num_seqs"), ("chunked_prefill", "maybe", "chunked_prefill"),
    ("request_ratee", "3", "did you mean"), ("decode_instances", "2", "prefill_instances")])
def test_bad_workload_fields(field, value, needle):
    with pytest.raises(costmodel.InputError, match=needle):
        serve(AR, **{field: value, "num_requests": 5})


def test_cli_serve(capsys):
    from costmodel.cli.main import main
    assert main(["serve", "model=llama-3-8b", "hardware=h100-sxm", "request_rate=5", "num_requests=20",
                 "--format", "json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    for k in ("requests_arrived", "requests_completed", "requests_preempted", "ttft_s", "tpot_s", "e2e_s",
              "throughput_tokens_per_s", "throughput_tokens_per_s_per_device", "goodput_requests_per_s",
              "mean_running_seqs", "mean_concurrency", "kv_utilisation_mean"):
        assert k in out
    assert main(["serve", "model=llama-3-8b", "hardware=h100-sxm", "block_size=x"]) == 2


def test_multi_step_scheduling_delays_admission(tmp_path):
    """vLLM's multi-step scheduling: once decoding, the scheduler looks at the queue every N steps.
    Request 0 arrives at t = 0 (prefill, then decoding alone); request 1 arrives 2.5 of its decode
    steps later. Single-step: request 1 starts within one step. N = 10: it waits for the block to
    end, 10 − 2.5 = 7.5 more decode steps (± 1 for where the arrival falls in a step)."""
    base = {"model": "llama-2-7b", "hardware": "a100-80gb", "runtime": "vllm"}
    one = costmodel.serve(base, request_rate=1.0, num_requests=1, prompt_len=100, gen_len=60,
                          chunked_prefill=False)
    tpot, ttft0 = one["tpot_s"]["mean"], one["ttft_s"]["mean"]
    trace = tmp_path / "t.csv"
    trace.write_text(f"arrival_s,prompt_len,gen_len\n0,100,60\n{ttft0 + 2.5 * tpot},100,60\n")
    waits = {}
    for n in (1, 10):
        sim = costmodel.serve(base, arrival=str(trace), num_scheduler_steps=n, chunked_prefill=False)
        assert sim["requests_completed"] == 2
        waits[n] = sim["ttft_s"]["p99"]          # the larger TTFT: request 1's
    extra = waits[10] - waits[1]
    assert 6.5 * tpot < extra < 8.5 * tpot


def test_token_latencies_by_hand():
    from costmodel.serving.timeline import TokenLatencies, token_stats
    t = TokenLatencies()
    t.step(1.0, 1, 1.0)          # one token 1 s after the last
    t.step(2.0, 2, 2.0)          # two sequences, one token each: two tokens at 2 s
    t.step(10.0, 1, 1.0)         # a step stretched by a prompt: one token at 10 s
    # mean over the 4 tokens: (1 + 2 + 2 + 10) / 4 = 3.75; cumulative tokens 1, 3, 4 at 1, 2, 10 s:
    # p50 (2 of 4 tokens) = 2, p90 (3.6) = 10, p99 = 10
    assert token_stats([t]) == {"mean": 3.75, "p50": 2.0, "p90": 10.0, "p99": 10.0}
    s = TokenLatencies()
    s.steps([3.0, 3.0], 2, 3.0)  # speculation: 2 sequences gain 3 tokens per 3 s step: 3 · 2 / 3 = 2 s each
    assert token_stats([s]) == {"mean": 2.0, "p50": 2.0, "p90": 2.0, "p99": 2.0}


def test_timeline_sampling_by_hand():
    from costmodel.serving.timeline import TIMELINE_DT0_S, TIMELINE_MAX, Timeline
    assert TIMELINE_DT0_S == 1e-3
    tl = Timeline()
    tl.step(0.0, 0.0025, queue=1, running=2, kv_tokens=10)        # samples at 0, 1, 2 ms
    tl.step(0.0055, 0.006, queue=0, running=1, kv_tokens=5, idle_kv=3)   # 3, 4, 5 ms idle; none in [5.5, 6)
    assert (tl.queue, tl.running, tl.kv) == ([1, 1, 1, 0, 0, 0], [2, 2, 2, 0, 0, 0], [10, 10, 10, 3, 3, 3])
    tl.step(0.006, 0.006 + (TIMELINE_MAX - 6) * 1e-3, 4, 4, 4)     # fills to TIMELINE_MAX: halved, Δ = 2 ms
    assert tl.dt == 2e-3 and len(tl.queue) == TIMELINE_MAX // 2 and tl.queue[:3] == [1, 1, 0]


def test_timeline_and_itl_in_a_run():
    # a lone request: every decoding step gives its one token, so ITL over tokens is its TPOT
    one = serve(AR, num_requests=1, prompt_len=256, gen_len=40)
    assert one["itl_s"]["mean"] == pytest.approx(one["tpot_s"]["mean"], rel=1e-9)
    r = serve(AR, request_rate=40, num_requests=1500, prompt_len_dist="lognormal:512:0.5", gen_len=128)
    tl = r["timeline"]
    n = len(tl["t_s"])
    assert 2 <= n <= 400 and tl["t_s"][1] == pytest.approx(tl["interval_s"])
    assert np.mean(tl["running_seqs"]) == pytest.approx(r["mean_running_seqs"], rel=0.05)
    assert np.mean(tl["kv_utilisation"]) == pytest.approx(r["kv_utilisation_mean"], rel=0.05)
    # prompt chunks stretch some decoding steps: the token tail is above the per-request tail
    assert r["itl_s"]["p99"] > r["tpot_s"]["p99"]
    # overloaded: the queue builds up over the run
    sat = serve(AR, num_requests=600, prompt_len=512, gen_len=128)
    over = serve(AR, request_rate=1.5 * sat["request_throughput_per_s"], num_requests=600, prompt_len=512,
                 gen_len=128)["timeline"]["queue_len"]
    assert max(over[len(over) // 2:]) > 10 * max(max(over[:len(over) // 10]), 1)
