"""One serving instance: a vLLM/SGLang-style scheduler stepping a model replica.

Every step (one forward pass):

1. Decoding sequences each add their verification tokens (1, γ+1 or the tree's); if their KV would
   not fit, the most recently admitted is preempted (its KV freed; it is recomputed later as a
   prefill of prompt + tokens generated so far, from the front of the queue): never a crash, never
   a lost request.
2. With ``chunked_prefill`` the rest of the ``max_num_batched_tokens`` budget goes to prompts in
   chunks: first those already started, then new ones admitted in arrival order while fewer than
   ``max_num_seqs`` run and their blocks fit (paged KV: ceil(tokens / block_size) blocks per
   sequence, the last one partly empty, with 1 % of the blocks kept free for admission as vLLM's
   watermark does). Without it, a step runs either whole prompts alone or decoding alone
   (prefills first), as vLLM did before chunking.
3. A shared system prompt of ``shared_prompt_len`` tokens is computed once per instance; later
   requests find its full blocks cached (prefix caching): not recomputed, stored once, still read
   by attention.

Decoding is fluid: a request with τ_i tokens per step finishes ceil(remaining / τ_i) steps after it
starts decoding, so the loop keeps per request only its start step and context, and the batch's
context sum ΣL = Σ(L0_i − S0_i·τ_i) + S·Στ_i at decoding step S. Between events (an arrival, a
completion, KV running out) decode-only steps are priced in bulk with one vector evaluation.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from costmodel.inputs.schedule import gamma_for
from costmodel.serving.timeline import Timeline, TokenLatencies

BULK_MAX = 2048
SCALAR_MAX = 8          # decode-only stretches this short are stepped with scalars (numpy costs more)


class Instance:
    def __init__(self, sim, role: str, gamma0: int):
        self.sim, self.role = sim, role
        w = sim.w
        self.bs = w.block_size
        self.max_seqs = w.max_num_seqs
        self.budget = sim.max_batched
        self.cap_blocks = sim.kv_capacity_tokens // self.bs
        self.watermark = max(1, int(0.01 * self.cap_blocks))
        self.clock = 0.0
        self.waiting = deque()
        self.prefilling = []
        self.dec = {}                 # rid -> [L0, S0, tau, remaining, cached, done0]
        self.heap = []
        self.S = 0
        self.A = self.tsum = self.csum = 0.0
        self.reserved = {}            # rid -> blocks held while prefilling
        self.psum = 0                 # Σ computed tokens of the prefilling requests
        self.R = 0
        self.prefix_blocks = 0
        self.prefix_ready = w.shared_prompt_len < self.bs
        self.gamma = gamma0
        self.gc = sim.costs.gamma_costs(gamma0)
        self.area_running = self.area_kv = self.area_system = self.busy_s = 0.0
        self.preemptions = 0
        self.msteps = w.num_scheduler_steps
        self.block_end = 0            # multi-step: the decoding step at which the scheduler runs next
        self.timeline = Timeline()
        self.itl = TokenLatencies()

    # ------------------------------------------------------------------ bookkeeping
    def n_in(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.dec)

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.dec)

    def add(self, rid: int, t: float):
        if not self.has_work() and self.clock < t:
            self.clock = t
        self.waiting.append(rid)

    def _blocks(self, tokens) -> int:
        return -(-int(tokens) // self.bs)

    def _dec_blocks_upper(self, extra_steps=0) -> float:
        n = len(self.dec)
        if not n:
            return 0.0
        sl = self.A + (self.S + extra_steps) * self.tsum - self.csum
        return (sl + n * (self.gc.slots + self.bs - 1)) / self.bs

    def _dec_blocks_exact(self, extra_steps=0) -> int:
        if not self.dec:
            return 0
        d = np.array(list(self.dec.values()))
        ctx = d[:, 0] + (self.S + extra_steps - d[:, 1]) * d[:, 2] - d[:, 4] + self.gc.slots
        return int(np.sum(np.ceil(ctx / self.bs)))

    def _kv_fits(self, extra_steps=1, add_blocks=0, margin=0) -> bool:
        limit = self.cap_blocks - self.prefix_blocks - self.R - add_blocks - margin
        if self._dec_blocks_upper(extra_steps) <= limit:
            return True
        return self._dec_blocks_exact(extra_steps) <= limit

    def _join(self, rid: int, context: float):
        """Start decoding ``rid`` with ``context`` tokens in its cache."""
        sim = self.sim
        done = sim.generated[rid]
        remaining = sim.gen[rid] - done
        if remaining <= 1e-9:
            self._complete(rid)
            return
        tau = sim.tau_of(rid, self.gc)
        cached = sim.cached[rid]
        self.dec[rid] = [context, self.S, tau, remaining, cached, done]
        self.A += context - self.S * tau
        self.tsum += tau
        self.csum += cached
        heapq.heappush(self.heap, (self.S + math.ceil(remaining / tau - 1e-9), rid, context))

    def _leave(self, rid: int):
        L0, S0, tau, remaining, cached, done = self.dec.pop(rid)
        self.A -= L0 - S0 * tau
        self.tsum -= tau
        self.csum -= cached
        if not self.dec:
            self.A = self.tsum = self.csum = 0.0
        return L0, S0, tau, remaining, cached, done

    def _complete(self, rid: int):
        sim = self.sim
        sim.generated[rid] = sim.gen[rid]
        sim.finish[rid] = self.clock
        sim.events.append(("done", rid, self.clock))

    def _preempt_last(self):
        rid = next(reversed(self.dec))
        L0, S0, tau, remaining, cached, done = self._leave(rid)
        p = (self.S - S0) * tau
        sim = self.sim
        sim.generated[rid] = min(math.floor(done + p), sim.gen[rid] - 1)
        sim.need[rid] = sim.prompt[rid] + sim.generated[rid]
        sim.computed[rid] = sim.cached[rid] = 0
        sim.preempted[rid] += 1
        self.preemptions += 1
        self.waiting.appendleft(rid)

    def _rebase(self, gamma: int):
        """γ changed (the schedule): restart every decoder's fluid progress at step S with its new τ."""
        self.gamma = gamma
        self.gc = self.sim.costs.gamma_costs(gamma)
        items = list(self.dec.items())
        self.dec, self.heap = {}, []
        self.A = self.tsum = self.csum = 0.0
        sim = self.sim
        for rid, (L0, S0, tau, remaining, cached, done) in items:
            p = (self.S - S0) * tau
            sim.generated[rid] = done + p
            self._join(rid, L0 + p)

    # ------------------------------------------------------------------ stepping
    def run_until(self, t_limit: float):
        """Step until the clock passes ``t_limit``, the instance idles, or a request leaves."""
        sim = self.sim
        while self.has_work() and self.clock < t_limit and not sim.events:
            self._step(t_limit)

    def run_stream(self, send, arrive, t_end: float):
        """The whole run of a lone instance under an open-loop stream (``send`` sorted): before each
        step every request sent by then joins the queue; an idle instance jumps to the next send.
        The same sequence of steps as the router's loop, without its per-event bookkeeping. Returns
        the time of the last completion (or rejection)."""
        sim = self.sim
        events = sim.events
        waiting = self.waiting
        n = len(send)
        nxt = 0
        step = self._step
        inf = math.inf
        last = 0.0
        while True:
            clock = self.clock
            while nxt < n and send[nxt] <= clock:
                arrive[nxt] = send[nxt]
                waiting.append(nxt)
                nxt += 1
            if not (waiting or self.prefilling or self.dec):
                if nxt >= n or send[nxt] >= t_end:
                    break
                self.clock = send[nxt]
                continue
            if clock >= t_end:
                break
            nt = send[nxt] if nxt < n else inf
            step(nt if nt < t_end else t_end)
            if events:
                last = max(last, events[-1][2])
                events.clear()
        while nxt < n and send[nxt] < t_end:          # sent after the clock stopped: queued at the end
            arrive[nxt] = send[nxt]
            waiting.append(nxt)
            nxt += 1
        return last

    def _admissible(self, rid) -> int:
        """Blocks ``rid`` needs to start (its prompt, its first token, the speculative slots), or -1
        when it can never fit alone (rejected)."""
        sim = self.sim
        if self.prefix_ready and sim.shared and sim.cached[rid] == 0 and sim.computed[rid] == 0 \
                and sim.need[rid] == sim.prompt[rid]:
            sim.cached[rid] = sim.computed[rid] = self.prefix_blocks * self.bs
        whole = self._blocks(sim.prompt[rid] + sim.gen[rid] + self.gc.slots - sim.cached[rid])
        if whole + self.prefix_blocks > self.cap_blocks:
            return -1
        return self._blocks(sim.need[rid] - sim.cached[rid] + 1 + self.gc.slots)

    def _step(self, t_limit: float):
        """One scheduler step: the decoders keep their KV (the newest preempted while they would not
        fit), then the prefill chunks and admissions under the token budget, then either a decode-only
        block or one mixed (or prefill-only) step."""
        sim = self.sim
        if sim.schedule:
            g = gamma_for(sim.schedule, max(len(self.dec) + len(self.prefilling), 1))
            if g != self.gamma:
                self._rebase(g)
        gc = self.gc
        dec = self.dec
        bs, slots = self.bs, gc.slots
        # 1. decoders keep their KV (preempt the newest while they would not fit)
        while dec:
            n = len(dec)
            limit = self.cap_blocks - self.prefix_blocks - self.R
            if (self.A + (self.S + 1) * self.tsum - self.csum + n * (slots + bs - 1)) / bs <= limit \
                    or self._dec_blocks_exact(1) <= limit:
                break
            self._preempt_last()
        if dec and self.S < self.block_end:          # inside a multi-step block: decode only
            self._bulk(t_limit)
            return
        # 2. prefill chunks and admissions
        chunked = sim.w.chunked_prefill
        q_tok = int(round(gc.q_tok))
        n_dec = len(dec)
        chunks = self._chunks_and_admissions(self.budget - n_dec * q_tok if chunked else self.budget)
        decode_now = bool(dec) and (chunked or not chunks)
        if not chunks:
            if dec:
                if self.msteps > 1:
                    self.block_end = self.S + self.msteps
                self._bulk(t_limit)
            return
        self._mixed_step(chunks, n_dec, q_tok, decode_now)

    def _chunks_and_admissions(self, budget: int) -> list:
        """The prefill chunks of this step, [(rid, tokens, context before)]: with chunked prefill the
        running prefills' next chunks first, then waiting requests admitted while the sequence limit,
        the KV blocks (with the watermark unless alone) and the token ``budget`` allow."""
        sim = self.sim
        dec, prefilling, waiting = self.dec, self.prefilling, self.waiting
        bs, slots = self.bs, self.gc.slots
        chunked = sim.w.chunked_prefill
        need, computed = sim.need, sim.computed
        chunks = []                   # (rid, c, context_before)
        if chunked:
            for rid in prefilling:
                if budget <= 0:
                    break
                c0 = computed[rid]
                c = min(need[rid] - c0, budget)
                chunks.append((rid, c, c0))
                budget -= c
        max_seqs = self.max_seqs
        while waiting and len(dec) + len(prefilling) < max_seqs:
            rid = waiting[0]
            if need[rid] - computed[rid] > 0 and budget <= 0:
                break
            blocks = self._admissible(rid)
            if blocks < 0:
                waiting.popleft()
                sim.rejected[rid] = True
                sim.events.append(("rejected", rid, self.clock))
                continue
            alone = not (dec or prefilling or chunks)
            limit = self.cap_blocks - self.prefix_blocks - self.R - blocks - (0 if alone else self.watermark)
            if dec:
                nd = len(dec)
                if (self.A + (self.S + 1) * self.tsum - self.csum + nd * (slots + bs - 1)) / bs > limit \
                        and self._dec_blocks_exact(1) > limit:
                    break
            elif limit < 0:
                break
            left = need[rid] - computed[rid]
            if not chunked and left > budget and not alone:
                break
            waiting.popleft()
            if left <= 0:                       # KV already here (disaggregated hand-off)
                self._join(rid, need[rid])
                continue
            self.reserved[rid] = blocks
            self.R += blocks
            prefilling.append(rid)
            c0 = computed[rid]
            self.psum += c0
            c = left if not chunked else min(left, budget)
            chunks.append((rid, c, c0))
            budget -= c
        return chunks

    def _mixed_step(self, chunks: list, n_dec: int, q_tok: int, decode_now: bool):
        """One step of the prefill ``chunks`` (and, when ``decode_now``, the ``n_dec`` decoders): its
        time from the pass tables (draft included), then the clock, the prefills' progress and the
        decoders' step count advance."""
        sim, gc = self.sim, self.gc
        need, computed = sim.need, sim.computed
        tok = lm = 0
        pairs = kv = 0.0
        finals = []
        for rid, c, l0 in chunks:
            tok += c
            pairs += c * l0 + c * (c + 1) / 2.0
            kv += l0 + c
            if l0 + c >= need[rid]:
                lm += 1
                finals.append(rid)
        costs = sim.costs
        if costs.draft_table is not None:
            draft_s = costs.draft_table.time(tok, lm, pairs, kv)
        if decode_now and n_dec:
            sl = self.A + self.S * self.tsum
            tok += n_dec * q_tok
            lm += int(round(n_dec * gc.q_lm))
            pairs += n_dec * gc.p0 + gc.p1 * sl
            kv += n_dec * gc.k0 + gc.k1 * sl
            extra = gc.extra_s(n_dec, sl / n_dec, costs.L_list) + costs.prompt_step_extra_s(len(chunks), True)
        else:
            extra = costs.prompt_step_extra_s(len(chunks), False)
        dt = costs.table.time(tok, lm, pairs, kv) + extra
        if costs.draft_table is not None:
            dt += draft_s
        self._account(dt, len(chunks) + (n_dec if decode_now else 0))
        if decode_now and n_dec:
            self.itl.step(dt, n_dec, self.tsum)
        self.clock += dt
        for rid, c, l0 in chunks:
            computed[rid] = l0 + c
        self.psum += tok - (n_dec * q_tok if decode_now and n_dec else 0)
        if decode_now and n_dec:
            self.S += 1
            if self.heap[0][0] <= self.S:
                self._pop_done()
        for rid in finals:
            self._prefill_done(rid)

    def _prefill_done(self, rid: int):
        sim = self.sim
        self.prefilling.remove(rid)
        self.psum -= sim.computed[rid]
        self.R -= self.reserved.pop(rid)
        if not self.prefix_ready and sim.shared and sim.cached[rid] == 0:
            self.prefix_ready = True
            self.prefix_blocks = sim.w.shared_prompt_len // self.bs
        if math.isnan(sim.first_tok[rid]):
            sim.first_tok[rid] = self.clock
            sim.generated[rid] = 1
        if self.role == "prefill":
            sim.events.append(("prefilled", rid, self.clock))
            return
        self._join(rid, sim.need[rid])

    def _pop_done(self):
        heap, S = self.heap, self.S
        while heap and heap[0][0] <= S:
            _, rid, ctx0 = heapq.heappop(heap)
            e = self.dec.get(rid)
            if e is None or e[0] != ctx0 or e[1] + math.ceil(e[3] / e[2] - 1e-9) != S:
                continue                       # a stale entry (preempted or rebased)
            self._leave(rid)
            self._complete(rid)

    def _account(self, dt, running):
        self.busy_s += dt
        self.area_running += dt * running
        used = self.A + self.S * self.tsum - self.csum + self.prefix_blocks * self.bs + self.psum
        self.area_kv += dt * used
        self.area_system += dt * self.n_in()
        if self.clock + dt > self.timeline.next:
            self.timeline.step(self.clock, self.clock + dt, len(self.waiting), running, used,
                               self.prefix_blocks * self.bs)

    def _valid_top(self):
        heap = self.heap
        while heap:
            fs, rid, ctx0 = heap[0]
            e = self.dec.get(rid)
            if e is not None and e[0] == ctx0 and e[1] + math.ceil(e[3] / e[2] - 1e-9) == fs:
                return fs
            heapq.heappop(heap)
        return None

    def _bulk(self, t_limit: float):
        """Decode-only steps up to the next completion, KV limit or ``t_limit``, priced in one go."""
        sim, gc = self.sim, self.gc
        top = self._valid_top()
        if self.S < self.block_end:
            top = min(top, self.block_end)
        k = max(1, min(top - self.S, BULK_MAX))
        # KV: the upper bound must stay within capacity for every step taken
        limit = self.cap_blocks - self.prefix_blocks - self.R
        n = len(self.dec)
        if self.tsum > 0:
            room = limit * self.bs - (self.A - self.csum + n * (gc.slots + self.bs - 1))
            k_kv = int(room // self.tsum) - self.S
            k = max(1, min(k, k_kv))
        q_tok = int(round(gc.q_tok))
        sl0 = self.A + self.S * self.tsum
        dt = sim.costs.table.time(n * q_tok, int(round(n * gc.q_lm)), n * gc.p0 + gc.p1 * sl0, n * gc.k0 + gc.k1 * sl0) \
            + gc.extra_s(n, sl0 / n, sim.costs.L_list)
        if k == 1 or self.clock + dt >= t_limit:         # one step: scalar arithmetic
            self._account(dt, n)
            self.itl.step(dt, n, self.tsum)
            self.clock += dt
            self.S += 1
            self._pop_done()
            return
        if math.isfinite(t_limit):       # steps only lengthen as contexts grow: enough to reach t_limit
            k = min(k, int((t_limit - self.clock) / dt) + 2)
        if k <= SCALAR_MAX:              # a few steps: scalar arithmetic, one at a time
            table, L_list = sim.costs.table, sim.costs.L_list
            tok, lm, p0, p1, k0, k1 = n * q_tok, int(round(n * gc.q_lm)), n * gc.p0, gc.p1, n * gc.k0, gc.k1
            for i in range(k):
                self._account(dt, n)
                self.itl.step(dt, n, self.tsum)
                self.clock += dt
                self.S += 1
                if i == k - 1 or self.clock >= t_limit:
                    break
                sl0 = self.A + self.S * self.tsum
                dt = table.time(tok, lm, p0 + p1 * sl0, k0 + k1 * sl0) + gc.extra_s(n, sl0 / n, L_list)
            self._pop_done()
            return
        self._bulk_arrays(k, n, q_tok, t_limit)

    def _bulk_arrays(self, k: int, n: int, q_tok: int, t_limit: float):
        """``k`` decode-only steps of ``n`` sequences priced as arrays (step times from the pass table at
        each step's KV length), stopping at ``t_limit``; the areas, ITL and timeline advance with them."""
        sim, gc = self.sim, self.gc
        j = np.arange(k, dtype=float)
        sl = self.A + (self.S + j) * self.tsum
        t = sim.costs.table.times(np.full(k, n * q_tok), np.full(k, int(round(n * gc.q_lm))),
                                  n * gc.p0 + gc.p1 * sl, n * gc.k0 + gc.k1 * sl)
        t = t + gc.extra_s_array(n, sl / n, sim.costs.L_grid)
        cum = np.cumsum(t)
        if math.isfinite(t_limit):
            m = int(np.searchsorted(cum, t_limit - self.clock, side="left")) + 1
            k = min(k, max(m, 1))
        dt = float(cum[k - 1])
        self.busy_s += dt
        self.area_running += dt * n
        used0 = self.prefix_blocks * self.bs - self.csum + self.psum
        self.area_kv += float(np.dot(t[:k], sl[:k])) + used0 * dt
        self.itl.steps(t[:k], n, self.tsum)
        if self.clock + dt > self.timeline.next:
            self.timeline.steps(self.clock, cum[:k], len(self.waiting), n, sl[:k] + used0,
                                self.prefix_blocks * self.bs)
        self.area_system += dt * self.n_in()
        self.clock += dt
        self.S += k
        self._pop_done()
