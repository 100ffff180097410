"""Searches over serving runs: the highest rate meeting SLOs, and the throughput/latency frontier.

* :func:`max_rate_search`: the SLO test (:func:`costmodel.serving.metrics.meets_slo`: every request
  served, the ``slo_percentile`` of TTFT and TPOT within ``slo_ttft_s`` / ``slo_tpot_s``) is
  monotone in the rate up to noise; the rate doubles from 1/s until it fails, then bisects the
  bracket to 2 % (every run with the same seed, so arrivals scale with the rate).
  ``at_fail`` is the run at the lowest failing rate tried (just above the answer): what broke.
* :func:`pareto_frontier`: for each tensor-parallel degree that fits (divisors of the heads up to
  ``n_devices``, one replica each) and each ``max_num_seqs`` in 1, 2, 4, …, 512, a saturated closed
  loop (``max_concurrency`` = max_num_seqs, every request sent at once) gives tokens/s per device
  and tokens/s per user (1 / mean TPOT); the points no other beats on both are the frontier.
"""

from __future__ import annotations

import math

from costmodel.errors import InputError
from costmodel.serving.metrics import meets_slo

REL_TOL = 0.02


def max_rate_search(rec, w) -> dict:
    from costmodel.serving.api import simulate
    if w.slo_ttft_s is None and w.slo_tpot_s is None:
        raise InputError("--max-rate needs slo_ttft_s and/or slo_tpot_s", field="slo_ttft_s")
    if w.num_requests is None and w.duration_s is None:
        w = w.replace(num_requests=500)
    if w.max_concurrency is not None:
        raise InputError("--max-rate searches an open-loop rate; leave out max_concurrency", field="max_concurrency")
    costs = None

    def run(rate):
        nonlocal costs
        res, sim = simulate(rec, w.replace(request_rate=rate), costs)
        costs = sim.costs
        return res, meets_slo(res, w)

    lo, hi, best, fail = 0.0, None, None, None
    rate = 1.0
    for _ in range(24):
        res, ok = run(rate)
        if ok:
            lo, best = rate, res
            rate *= 2.0
        else:
            hi, fail = rate, res
            break
    if hi is None:
        return {"max_request_rate": lo, "at_max": best, "at_fail": None, "note": "the SLOs held at every rate tried"}
    if best is None:                       # fails at 1/s: search downwards
        hi_r = 1.0
        for _ in range(12):                # down to 1/4096 requests/s
            hi_r /= 2.0
            res, ok = run(hi_r)
            if ok:
                lo, best = hi_r, res
                hi = hi_r * 2.0
                break
            fail = res
        if best is None:
            return {"max_request_rate": 0.0, "at_max": None, "at_fail": fail,
                    "note": "the SLOs fail even at very low load"}
    while hi - lo > REL_TOL * lo:
        mid = 0.5 * (lo + hi)
        res, ok = run(mid)
        if ok:
            lo, best = mid, res
        else:
            hi, fail = mid, res
    return {"max_request_rate": lo, "at_max": best, "at_fail": fail}


def pareto_frontier(rec, w, seqs=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)) -> dict:
    from costmodel.engine.evaluate import build_exec
    from costmodel.serving.api import simulate
    heads = build_exec(rec).model.n_heads
    tps = [d for d in (1, 2, 4, 8, 16) if d <= max(rec.n_devices, 1) and heads % d == 0] or [rec.n_devices]
    n_req = w.num_requests or 0
    points = []
    for tp in tps:
        r = rec.replace(n_devices=tp, tensor_parallel=tp, pipeline_parallel=1)
        costs = None
        for s in seqs:
            ww = w.replace(max_num_seqs=s, max_concurrency=s, request_rate=math.inf,
                           num_requests=max(n_req, 4 * s, 32), duration_s=None)
            try:
                res, sim = simulate(r, ww, costs if costs is not None and costs.max_num_seqs >= s else None)
            except InputError:
                break                       # does not fit at this TP degree
            costs = sim.costs
            points.append({"tensor_parallel": tp, "max_num_seqs": s,
                           "tokens_per_s_per_device": res["throughput_tokens_per_s_per_device"],
                           "tokens_per_s_per_user": res["tokens_per_s_per_user"],
                           "ttft_p50_s": res["ttft_s"]["p50"], "mean_running_seqs": res["mean_running_seqs"]})
    pts = [p for p in points if p["tokens_per_s_per_user"]]
    for p in pts:
        p["pareto"] = not any(q is not p and q["tokens_per_s_per_device"] >= p["tokens_per_s_per_device"]
                              and q["tokens_per_s_per_user"] >= p["tokens_per_s_per_user"]
                              and (q["tokens_per_s_per_device"], q["tokens_per_s_per_user"]) !=
                              (p["tokens_per_s_per_device"], p["tokens_per_s_per_user"]) for q in pts)
    return {"points": pts, "frontier": sorted((p for p in pts if p["pareto"]),
                                              key=lambda p: p["tokens_per_s_per_user"])}
