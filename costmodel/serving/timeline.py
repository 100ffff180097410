"""What a serving instance records as it steps: a sampled timeline and the inter-token latencies.

* :class:`Timeline`: the queue length, the sequences in the step's batch and the KV tokens held,
  sampled at t = 0, Δ, 2Δ, … (the state of the step that spans each sample time; 0 while the
  instance idles). At most :data:`TIMELINE_MAX` samples: when full, every other sample is dropped
  and Δ doubles, so a run of any length ends with between ``TIMELINE_MAX / 2`` and ``TIMELINE_MAX``
  samples at one fixed interval (Δ starts at :data:`TIMELINE_DT0_S`).
* :class:`TokenLatencies`: each decoding step of duration dt over n sequences that gain Στ_i tokens
  gives Στ_i tokens an inter-token latency of dt · n / Στ_i (the fluid view of speculation: a step
  that gains τ tokens spaces them dt/τ apart; a streaming client that times chunks would see dt once
  per chunk). Plain decoding: n tokens, each dt after the previous one. A step that also runs
  prompt chunks is that long for its decoders too — the stall that separates p99 ITL from TPOT.
"""

from __future__ import annotations

import numpy as np

TIMELINE_MAX = 400
TIMELINE_DT0_S = 1e-3


class Timeline:
    def __init__(self):
        self.dt = TIMELINE_DT0_S
        self.next = 0.0                   # the next sample time
        self.queue, self.running, self.kv = [], [], []

    def _push(self, q, r, kv):
        self.queue.append(q)
        self.running.append(r)
        self.kv.append(kv)
        if len(self.queue) >= TIMELINE_MAX:
            self.queue, self.running, self.kv = self.queue[::2], self.running[::2], self.kv[::2]
            self.dt *= 2.0
        self.next = len(self.queue) * self.dt

    def step(self, t0: float, t1: float, queue: int, running: int, kv_tokens: float, idle_kv: float = 0.0):
        """A step over [t0, t1) with this state; sample times before t0 not yet taken were idle."""
        while self.next < t0:
            self._push(0, 0, idle_kv)
        while self.next < t1:
            self._push(queue, running, kv_tokens)

    def steps(self, t0: float, cum, queue: int, running: int, kv_tokens, idle_kv: float = 0.0):
        """Consecutive steps from ``t0`` ending at ``t0 + cum`` (array), KV held ``kv_tokens[j]`` in step j."""
        while self.next < t0:
            self._push(0, 0, idle_kv)
        end = t0 + float(cum[-1])
        while self.next < end:
            j = int(np.searchsorted(cum, self.next - t0, side="right"))
            self._push(queue, running, float(kv_tokens[min(j, len(cum) - 1)]))


def merge_timelines(timelines: list, capacity_tokens: float, t_end: float) -> dict:
    """The instances' timelines summed on the coarsest interval, up to ``t_end``: ``interval_s``,
    ``t_s``, ``queue_len``, ``running_seqs``, ``kv_utilisation`` (KV held ÷ all instances' capacity)."""
    dt = max(t.dt for t in timelines)
    cols = []
    for t in timelines:
        k = int(round(dt / t.dt))
        cols.append((np.asarray(t.queue[::k], float), np.asarray(t.running[::k], float), np.asarray(t.kv[::k], float)))
    n = max(len(c[0]) for c in cols)
    n = min(n, int(np.floor(t_end / dt)) + 1) if np.isfinite(t_end) else n
    q, r, kv = np.zeros(n), np.zeros(n), np.zeros(n)
    for cq, cr, ck in cols:
        m = min(n, len(cq))
        q[:m] += cq[:m]
        r[:m] += cr[:m]
        kv[:m] += ck[:m]
    return {"interval_s": dt, "t_s": (np.arange(n) * dt).tolist(), "queue_len": q.astype(int).tolist(),
            "running_seqs": r.astype(int).tolist(),
            "kv_utilisation": (kv / max(capacity_tokens, 1.0)).tolist()}


class TokenLatencies:
    """Inter-token latencies with the tokens they apply to (values and weights)."""

    def __init__(self):
        self.v, self.w = [], []           # one decoding step each
        self.va, self.wa = [], []         # arrays of steps priced together

    def step(self, dt: float, n: int, tokens: float):
        self.v.append(dt * n / tokens)
        self.w.append(tokens)

    def steps(self, dts, n: int, tokens: float):
        self.va.append(np.asarray(dts, dtype=float) * (n / tokens))
        self.wa.append(np.full(len(dts), tokens))


def token_stats(recorders: list) -> dict:
    """mean, p50, p90, p99 over tokens: the mean is Σ v·w / Σ w; pXX the smallest latency at or below
    which at least XX % of the tokens lie."""
    v = np.concatenate([np.asarray(r.v, float) for r in recorders] + [a for r in recorders for a in r.va])
    w = np.concatenate([np.asarray(r.w, float) for r in recorders] + [a for r in recorders for a in r.wa])
    if v.size == 0 or w.sum() <= 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    order = np.argsort(v, kind="stable")
    v, cw = v[order], np.cumsum(w[order])
    total = cw[-1]
    pct = {p: float(v[min(int(np.searchsorted(cw, p / 100.0 * total * (1 - 1e-12), side="left")), v.size - 1)])
           for p in (50, 90, 99)}
    return {"mean": float(np.dot(v, w[order]) / total), "p50": pct[50], "p90": pct[90], "p99": pct[99]}
