"""The serving run: requests arrive, a router hands them to instances, instances step.

Co-located serving: ``replicas`` instances, each request to the one with the fewest requests in it.
Disaggregated (xPyD): ``prefill_instances`` run prompts only; a finished prompt's KV cache moves to
the least loaded of the ``decode_instances`` over the link between them
(:func:`costmodel.engine.parallel.kv_transfer_s`), and decoding starts when it lands.

The loop always advances the instance that is furthest behind, never past the next arrival or
hand-off, so every request enters an instance at the step boundary after it arrives. Closed loop
(``max_concurrency`` = N): a request is sent at its scheduled time or, when N are in flight, the
moment one of them completes; its latencies count from the moment it is sent, as a benchmark
client measures them.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from costmodel.engine.parallel import kv_transfer_s
from costmodel.errors import InputError
from costmodel.serving.instance import Instance
from costmodel.serving.stepcost import StepCosts, separate_draft
from costmodel.inputs.schedule import gamma_for, ranges
from costmodel.serving.workload import Requests, Workload


class Simulation:
    def __init__(self, rec, w: Workload, reqs: Requests, costs: StepCosts | None = None):
        self.rec, self.w, self.reqs = rec, w, reqs
        n = len(reqs.send_s)
        self.n = n
        self.prompt = reqs.prompt_len.tolist()
        self.gen = reqs.gen_len.tolist()
        self.alpha = reqs.alpha
        self.need = list(self.prompt)
        self.computed = [0] * n
        self.cached = [0] * n
        self.generated = [0.0] * n
        self.preempted = [0] * n
        self.rejected = [False] * n
        self.arrive = np.full(n, np.nan)       # sent to the server
        self.first_tok = [math.nan] * n
        self.finish = [math.nan] * n
        self.shared = w.shared_prompt_len > 0
        self.events = []
        self.max_batched = w.max_num_batched_tokens
        max_ctx = float(np.max(reqs.prompt_len + reqs.gen_len)) if n else 64.0
        check_request_context(rec, max_ctx)
        self.costs = costs or StepCosts(rec, w.max_num_seqs, self.max_batched, max_ctx + 64,
                                                 w.num_scheduler_steps)
        self.kv_capacity_tokens = self.costs.kv_capacity_tokens(self.max_batched)
        self._tau_cache = {}
        #: the record's γ schedule as (lo, hi, γ) ranges, or () without one
        self.schedule = ranges(rec.gamma_schedule) if rec.gamma_schedule else ()
        sched = self.schedule
        g0 = gamma_for(sched, 1) if sched else (rec.gamma if rec.strategy == "speculative" else
                                                 (1 if rec.strategy == "tree" else 0))
        if w.disaggregated:
            self.prefill = [Instance(self, "prefill", g0) for _ in range(w.prefill_instances)]
            self.decode = [Instance(self, "decode", g0) for _ in range(w.decode_instances)]
        else:
            self.prefill = []
            self.decode = [Instance(self, "both", g0) for _ in range(w.replicas)]
        self.instances = self.prefill + self.decode
        self.transfer_area = 0.0

    def tau_of(self, rid: int, gc) -> float:
        taus = self._tau_cache.get(gc.gamma)
        if taus is None:
            taus = self._tau_cache[gc.gamma] = gc.tau(self.alpha).tolist()
        return taus[rid]

    def devices(self) -> int:
        """Devices in the deployment: instances × (n_devices + a draft's own device)."""
        per = self.rec.n_devices + (1 if separate_draft(self.rec) and self.rec.strategy in ("speculative", "tree")
                                    else 0)
        return len(self.instances) * per

    def run(self) -> float:
        """Simulate; returns the end of the measured window (s)."""
        w, send = self.w, self.reqs.send_s.copy()
        self.send = send
        t_end = w.duration_s if w.duration_s is not None else math.inf
        cap = w.max_concurrency if w.max_concurrency is not None else math.inf
        nxt = 0                       # next request to send
        freed = 0                     # next request a closed loop's freed client has not yet sent
        in_flight = 0
        handoffs = []                 # (time, rid) KV landing on a decode instance
        kv_per_token = self.costs.kv_bytes_total_per_token()
        ex = self.costs.ex
        last = 0.0
        single = len(self.instances) == 1
        if single and w.max_concurrency is None:
            last = self.instances[0].run_stream(send, self.arrive, t_end)
            return t_end if math.isfinite(t_end) else last
        while True:
            t_arr = send[nxt] if nxt < self.n and in_flight < cap else math.inf
            t_hand = handoffs[0][0] if handoffs else math.inf
            t_ext = min(t_arr, t_hand)
            if single:
                inst = self.instances[0] if self.instances[0].has_work() else None
            else:
                busy = [i for i in self.instances if i.has_work()]
                inst = min(busy, key=lambda i: i.clock) if busy else None
            if t_ext >= t_end and (inst is None or inst.clock >= t_end):
                break
            if inst is None and math.isinf(t_ext):
                break
            if inst is None or t_ext <= inst.clock:
                if t_hand <= t_arr:
                    t, rid = heapq.heappop(handoffs)
                    min(self.decode, key=Instance.n_in).add(rid, t)
                else:
                    rid = nxt
                    nxt += 1
                    in_flight += 1
                    self.arrive[rid] = send[rid]
                    group = self.prefill or self.decode
                    (group[0] if single else min(group, key=Instance.n_in)).add(rid, send[rid])
                continue
            inst.run_until(min(t_ext, t_end) if math.isfinite(t_end) else t_ext)
            for kind, rid, t in self.events:
                if kind == "prefilled":
                    x = float(kv_transfer_s(self.prompt[rid] * kv_per_token, ex.hw, ex.tp, ex.pp))
                    self.transfer_area += x
                    heapq.heappush(handoffs, (t + x, rid))
                    continue
                in_flight -= 1
                last = max(last, t)
                if w.max_concurrency is not None:
                    # the client sends its next request as this one completes: each completion frees
                    # one client, so requests finishing in the same step send distinct next requests
                    freed = max(freed, nxt)
                    if freed < self.n and send[freed] < t:
                        send[freed] = t
                        freed += 1
            self.events.clear()
        return t_end if math.isfinite(t_end) else last


def check_request_context(rec, max_ctx: float) -> None:
    """The longest request (prompt_len + gen_len tokens) must fit the model's max_context, as a
    runtime refuses a longer one (vLLM: "This model's maximum context length is ..."); InputError."""
    from costmodel.inputs.model import load_model
    model = load_model(rec.model)
    limit = model.max_context
    if limit is not None and max_ctx > limit:
        raise InputError(f"requests reach prompt_len + gen_len = {max_ctx:.0f} tokens, beyond "
                         f"{model.id}'s max_context {limit}", field="prompt_len",
                         allowed=f"prompt_len + gen_len <= max_context = {limit}")
