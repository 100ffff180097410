"""What a serving run reports.

* ``ttft_s``: first token − sent; ``tpot_s``: (finish − first token) / (gen_len − 1) per request
  (requests of one token have none), the mean inter-token latency as ``vllm bench serve`` reports it;
  ``e2e_s``: finish − sent. Each as mean, p50, p90, p99 over the completed requests.
* ``itl_s``: inter-token latency over tokens (every token generated in a decoding step, weighted
  by tokens, :mod:`costmodel.serving.timeline`): mean, p50, p90, p99. TPOT is each request's mean; ITL's
  tail holds the decode steps stretched by prompt chunks.
* ``timeline``: queue length, sequences in the batch and KV utilisation sampled every
  ``interval_s`` (at most 400 samples, :class:`costmodel.serving.timeline.Timeline`), all instances summed.
* ``throughput_tokens_per_s``: tokens generated in the window ÷ the window (the window ends at
  ``duration_s``, or when the last request completes); per device: ÷ all devices of the deployment.
  ``tokens_per_s_per_user``: 1 / mean TPOT.
* ``goodput_requests_per_s``: completed requests meeting every SLO given ÷ the window.
* ``mean_running_seqs``: time-average of sequences in the instances' batches; ``mean_concurrency``:
  time-average of requests inside the server (queued, prefilling, decoding, or their KV in flight
  between instances), integrated step by step; Little's law says it equals arrival rate × mean
  time in the server, which ``littles_law`` compares (over requests that completed in a drained
  run both sides count the same time, so a gap means lost time in the bookkeeping).
* ``kv_utilisation_mean``: time-average of KV tokens held ÷ capacity; ``kv_block_waste_fraction``:
  the share of allocated block slots left empty (the last block of every sequence).
* Every request sent is in exactly one of completed, running (admitted, not finished), queued
  (waiting for admission or for its KV hand-off) and rejected (too long for the KV cache alone).
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.serving.timeline import merge_timelines, token_stats


def _stats(x) -> dict:
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p = np.percentile(x, [50, 90, 99])
    return {"mean": float(x.mean()), "p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}


def summarise(sim, t_window: float) -> dict:
    """The serving figures of a run over the window ``[0, t_window]`` (module docstring)."""
    w = sim.w
    sent = sim.arrive
    first = np.asarray(sim.first_tok, dtype=float)
    fin = np.asarray(sim.finish, dtype=float)
    gen = np.asarray(sim.gen, dtype=float)
    n_sent, done, late, rejected, running, queued = _request_states(sim, fin, t_window)
    ttft = first[done] - sent[done]
    multi = done & (gen > 1)
    tpot = (fin[multi] - first[multi]) / (gen[multi] - 1.0)
    e2e = fin[done] - sent[done]
    tokens = _tokens_generated(sim, gen, done, late)
    T = max(t_window, 1e-12)
    devices = sim.devices()
    good = _meeting_slos(w, done, ttft, multi, tpot)
    area_system = sum(i.area_system for i in sim.instances) + sim.transfer_area
    conc = area_system / T
    # Little: λ · W over the window (time in the server, requests still inside counted to the end)
    inside = np.where(done, fin, T) - sent
    inside = inside[~np.isnan(sent) & ~rejected]
    little = n_sent / T * float(np.mean(np.clip(inside, 0, None))) if n_sent else 0.0
    cap = sim.kv_capacity_tokens * len(sim.instances)
    kv_area = sum(i.area_kv for i in sim.instances)
    mean_tpot = float(np.mean(tpot)) if tpot.size else None
    waste = _block_waste(np.asarray(sim.prompt, dtype=float)[done] + gen[done], w.block_size)
    out = {
        "requests_arrived": n_sent,
        "requests_completed": int(done.sum()),
        "requests_running": running,
        "requests_queued": queued,
        "requests_rejected": int(rejected.sum()),
        "requests_preempted": int(np.sum(np.asarray(sim.preempted) > 0)),
        "preemptions": int(sum(i.preemptions for i in sim.instances)),
        "ttft_s": _stats(ttft),
        "tpot_s": _stats(tpot),
        "itl_s": token_stats([i.itl for i in sim.instances]),
        "e2e_s": _stats(e2e),
        "duration_s": T,
        "request_throughput_per_s": float(done.sum()) / T,
        "throughput_tokens_per_s": tokens / T,
        "throughput_tokens_per_s_per_device": tokens / T / devices,
        "tokens_per_s_per_user": (1.0 / mean_tpot) if mean_tpot else None,
        "goodput_requests_per_s": float(good.sum()) / T,
        "slo_attainment": float(good.sum()) / max(int(done.sum()), 1),
        "mean_running_seqs": sum(i.area_running for i in sim.instances) / T,
        "mean_concurrency": conc,
        "kv_utilisation_mean": kv_area / T / max(cap, 1),
        "kv_capacity_tokens": sim.kv_capacity_tokens,
        "kv_block_waste_fraction": waste,
        "littles_law": {"mean_concurrency": conc, "arrival_rate_x_mean_time_in_system_s": little,
                        "rel_error": (conc - little) / little if little > 0 else 0.0},
        "n_devices_total": devices,
        "instances": len(sim.instances),
        "timeline": merge_timelines([i.timeline for i in sim.instances], cap, T),
    }
    return out


def _request_states(sim, fin, t_window: float) -> tuple:
    """(sent, completed mask, finished-late mask, rejected mask, running, queued): every request sent is
    in exactly one of completed, running, queued and rejected."""
    n_sent = int(np.sum(~np.isnan(sim.arrive)))
    done = ~np.isnan(fin) & (fin <= t_window + 1e-12)
    rejected = np.asarray(sim.rejected, dtype=bool)
    admitted = set()
    for inst in sim.instances:
        admitted.update(inst.dec)
        admitted.update(inst.prefilling)
    # a request finished in a step that ran past the window's end is still running at the end
    late = ~np.isnan(fin) & (fin > t_window + 1e-12)
    running = len(admitted) + int(np.sum(late))
    queued = n_sent - int(done.sum()) - running - int(rejected.sum())
    return n_sent, done, late, rejected, running, queued


def _tokens_generated(sim, gen, done, late) -> float:
    """Tokens generated in the window: the completed requests', those still decoding so far, and those
    of requests finished in a step past the window's end."""
    tokens = float(gen[done].sum())
    for inst in sim.instances:                          # tokens of requests still decoding
        for rid, (L0, S0, tau, remaining, cached, d0) in inst.dec.items():
            tokens += min(d0 + (inst.S - S0) * tau, gen[rid])
    tokens += float(np.sum(np.asarray(sim.generated)[late]))
    return tokens


def _meeting_slos(w, done, ttft, multi, tpot):
    """Mask of the completed requests whose TTFT and TPOT (requests of one token have none) meet the
    SLOs given."""
    good = done.copy()
    if w.slo_ttft_s is not None:
        good[done] &= ttft <= w.slo_ttft_s
    if w.slo_tpot_s is not None:
        ok = np.ones(len(done), dtype=bool)
        ok[multi] = tpot <= w.slo_tpot_s
        good &= ok
    return good


def _block_waste(lens, bs: int) -> float:
    """Mean share of the allocated block slots left empty: (⌈len/bs⌉·bs − len) / (⌈len/bs⌉·bs)."""
    return float(np.mean((np.ceil(lens / bs) * bs - lens) / (np.ceil(lens / bs) * bs))) if lens.size else 0.0


def meets_slo(res: dict, w) -> bool:
    """Every completed request counted; the SLO percentile of TTFT and TPOT within the targets, and
    nothing left unserved."""
    if res["requests_completed"] < res["requests_arrived"] - res["requests_rejected"] or res["requests_completed"] == 0:
        return False
    pct = w.slo_percentile
    key = "p99" if pct >= 99 else "p90" if pct >= 90 else "p50"
    if w.slo_ttft_s is not None and res["ttft_s"][key] > w.slo_ttft_s:
        return False
    if w.slo_tpot_s is not None and res["tpot_s"][key] is not None and res["tpot_s"][key] > w.slo_tpot_s:
        return False
    return True


def finite(x):
    return x is not None and not (isinstance(x, float) and math.isnan(x))
