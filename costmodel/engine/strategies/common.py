"""What every strategy shares: the evaluation context, its outcome, decode/prefill pass shapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from costmodel.engine.memory import Footprint
from costmodel.engine.execution import Exec
from costmodel.engine.ops import PassShape, pairs_per_kv_token_bound
from costmodel.inputs.record import Record
from costmodel.engine.roofline import RECORD_OPS, Cost, overhead_cost
from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.pass_memo import exec_key, shared, value_key


@dataclass
class Ctx:
    """A record resolved into objects and numeric arrays (all arrays broadcast together)."""

    rec: Record
    ex: Exec                       # the target on its TP group
    B: np.ndarray                  # batch_size (prompts)
    P: np.ndarray                  # prompt_len
    G: np.ndarray                  # gen_len
    gamma: np.ndarray
    alpha: np.ndarray | None = None
    tau: np.ndarray | None = None
    draft_kv_budget: np.ndarray | None = None
    n_branches: np.ndarray = field(default_factory=lambda: np.asarray(1.0))
    shared_prefix_len: np.ndarray = field(default_factory=lambda: np.asarray(0.0))

    @property
    def L(self) -> np.ndarray:
        """Mean context while decoding: prompt + half the generated tokens (costs are linear in L)."""
        return self.P + self.G / 2.0

    @property
    def L_peak(self) -> np.ndarray:
        """Context when the last token is generated: what the KV cache must hold."""
        return self.P + self.G


class Pass(NamedTuple):
    """One named pass (or the passes of one phase) as a strategy priced it: its Cost (time per
    device, work summed over the group, per-operator rows) and the Exec that ran it (model, devices)."""

    cost: Cost
    ex: Exec


@dataclass
class Outcome:
    step: Cost                      # one decoding step (all its passes), per-step overhead included
    tokens_per_step: np.ndarray     # tokens gained per sequence per step (broadcasts to the step's shape)
    n_seqs: np.ndarray              # sequences decoding together
    prefill: Cost
    memory: Footprint               # per-device breakdown and totals (costmodel.engine.memory)
    extras: dict = field(default_factory=dict)
    #: the passes priced, by name: 'prefill', 'draft_prefill', 'decode', 'draft', 'verify' (Pass)
    passes: dict = field(default_factory=dict)


def decode_shape(B, q, L, extra_ops=None) -> PassShape:
    """B sequences × q causal new tokens over L cached tokens; KV read once per sequence."""
    B, q, L = (np.asarray(x, dtype=float) for x in (B, q, L))
    return PassShape(tokens=B * q, pairs=B * (q * L + q * (q + 1) / 2.0), kv_hbm_tokens=B * L,
                     lm_tokens=B * q, extra_ops=extra_ops or [], seqs=B,
                     max_pairs_per_kv_token=pairs_per_kv_token_bound(B, L, q, q * (q + 1) / 2.0))


def chain_verify_shape(B, q, L, scorer: str = "multi_query") -> PassShape:
    """The target's pass scoring q = γ+1 tokens of each of B sequences at context L, by the runtime's
    scorer (``Runtime.spec_scorer``):

    * ``multi_query``: :func:`decode_shape` — one sequence of q causal queries, its KV read once (B·L);
    * ``batch_expansion`` (vLLM's V0 ``BatchExpansionTop1Scorer``): each sequence becomes q single-query
      sequences, the j-th (j = 0…q−1) holding the first j drafted tokens, so its query sits at context
      L + j and it reads those L + j cached tokens itself: KV read B·Σ_j (L + j) = B·(q·L + q(q−1)/2),
      over B·q sequences. Tokens, logits and attention pairs (Σ_j (L + j + 1) = q·L + q(q+1)/2) are
      those of the multi-query pass."""
    if scorer == "multi_query":
        return decode_shape(B, q, L)
    B, q, L = (np.asarray(x, dtype=float) for x in (B, q, L))
    return PassShape(tokens=B * q, pairs=B * (q * L + q * (q + 1) / 2.0), kv_hbm_tokens=B * (q * L + q * (q - 1) / 2.0),
                     lm_tokens=B * q, seqs=B * q)


def prefill_shape(B, P) -> PassShape:
    """Prompt processing: B·P tokens, causal attention P(P+1)/2 pairs each, logits for the last token."""
    B = np.asarray(B, dtype=float)
    P = np.maximum(np.asarray(P, dtype=float), 1.0)
    tokens = B * P
    return PassShape(tokens=tokens, pairs=B * (P * (P + 1) / 2.0), kv_hbm_tokens=tokens, lm_tokens=B, seqs=B)


def spec_method(draft_model: str | None) -> str:
    """The speculation method whose per-step host work a runtime prices: the draft kind (medusa, eagle,
    none, self; an eagle3 head as eagle, suffix drafting as none, and ``mtp`` as eagle: the runtimes
    run DeepSeek's MTP module through their EAGLE path — SGLang's ``--speculative-algorithm EAGLE``,
    vLLM's EAGLE proposer), or ``model`` for a separate draft model."""
    draft_model = {"eagle3": "eagle", "suffix": "none", "mtp": "eagle"}.get(draft_model, draft_model)
    return draft_model if draft_model in ("medusa", "eagle", "none", "self") else "model"


def spec_step_host_s(ex: Exec, method: str):
    """Host seconds per speculative or tree step beyond its forward passes:

        ops · host_per_kernel_s + syncs · (kernel_launch_s + host-link latency) + spec_step_overhead_s

    ops and syncs being the runtime's counts for ``method`` (candidate construction, acceptance with
    its device-to-host syncs, KV compaction). A sync makes the host wait for the device, so this work
    does not overlap the passes: it adds to the step."""
    rt, hw = ex.rt, ex.hw
    sync_s = hw.kernel_launch_s + hw.host.latency_s
    return rt.spec_host_ops(method) * rt.host_per_kernel_s + rt.spec_syncs(method) * sync_s + rt.spec_step_overhead_s


def step_ranks(ex: Exec):
    """Worker ranks of one instance, the ``ranks`` of ``Runtime.step_host_s``: its devices
    (tensor × attention-data × pipeline parallel)."""
    return ex.stage_devices * ex.pp


def with_step_overhead(cost: Cost, ex: Exec, method: str | None = None, seqs=1.0, prefill: bool = False) -> Cost:
    """``cost`` plus the runtime's per-step host work: for every step ``Runtime.step_host_s`` of the
    instance's ranks (step_overhead_s + step_overhead_per_rank_s · (ranks − 1), ranks = tp·dp·pp:
    :func:`step_ranks`), the engine version's
    host work the device waits for (``Runtime.host_s``: host_step_s / N + host_per_seq_s · seqs, N = its
    scheduler steps per invocation; a prefill is a scheduler invocation of its own, N = 1), and for a
    speculative or tree step of ``method`` also :func:`spec_step_host_s`."""
    rt = ex.rt
    seconds = rt.step_host_s(step_ranks(ex))
    if method is not None:
        seconds = seconds + spec_step_host_s(ex, method)
    if rt.host_step_s or rt.host_per_seq_s:
        seconds = seconds + rt.host_s(np.asarray(seqs, dtype=float), 1 if prefill else None)
    return cost + overhead_cost(np.broadcast_to(seconds, np.shape(cost.time_s)),
                                np.shape(cost.time_s))


def ctx_pass_key(ctx: Ctx, B=None, P=None) -> tuple:
    """What a target pass over ``ctx`` reads (engine.pass_memo): its Exec, ``ctx``'s or the given B and
    P, G, and whether operator rows are kept."""
    return (exec_key(ctx.ex), value_key(ctx.B if B is None else B), value_key(ctx.P if P is None else P),
            value_key(ctx.G), RECORD_OPS.get())


@shared(ctx_pass_key)
def prefill_cost(ctx: Ctx, B=None, P=None) -> Cost:
    """Prompt processing of the record's model: :func:`prefill_passes` plus the runtime's step
    overhead, charged once."""
    B = ctx.B if B is None else B
    P = ctx.P if P is None else P
    return with_step_overhead(prefill_passes(ctx.ex, B, P), ctx.ex, seqs=B, prefill=True)


def prefill_passes(ex: Exec, B, P) -> Cost:
    """The passes that process B prompts of P tokens on ``ex`` (no step overhead): the B·P tokens in
    one pass; with a runtime that prefills one prompt at a time (``prefill_per_sequence``) B passes
    of P tokens (weights re-read per pass, same FLOPs); with a runtime that chunks prefill
    (``prefill_chunk_tokens`` = C) each such pass of T tokens runs as n = ceil(T / C) passes of T/n
    tokens. A draft model's prompt processing is priced here too: the runtime runs it as it runs
    the target's."""
    # one prompt per pass: its cost depends on P alone, so it is priced once per prompt length (a
    # batch of ones shaped to broadcast, every element the same operations as over the whole grid)
    # and repeated B times
    if ex.rt.prefill_per_sequence:
        cost, n = _prompt_prefill_pass(ex, P, np.ndim(B))
        repeats = np.asarray(B, dtype=float)
    else:
        cost, n = _prefill_pass(ex, B, P)
        repeats = None
    if n is None:
        return cost if repeats is None else cost.scale(repeats)
    return cost.scale(n if repeats is None else n * repeats)


def _prefill_pass(ex: Exec, B, P):
    """(Cost of one prefill pass of B·P tokens, its number of runs n): with a runtime that chunks prefill
    (``prefill_chunk_tokens`` = C) the pass of T tokens is n = ceil(T / C) passes of T/n tokens; else
    n is None (one pass)."""
    shape = prefill_shape(B, P)
    chunk = ex.rt.prefill_chunk_tokens
    if chunk is None:
        return pass_cost(shape, ex), None
    n = np.ceil(shape.tokens / chunk)
    per = PassShape(tokens=shape.tokens / n, pairs=shape.pairs / n, kv_hbm_tokens=shape.kv_hbm_tokens / n,
                    lm_tokens=shape.lm_tokens / n, seqs=shape.seqs)
    return pass_cost(per, ex), n


class _PromptPrefill(NamedTuple):
    cost: Cost
    n: object

    @property
    def time_s(self):                    # the size engine.pass_memo keeps it by
        return self.cost.time_s


@shared(lambda ex, P, ndim: (exec_key(ex), value_key(P), ndim, RECORD_OPS.get()))
def _prompt_prefill_pass(ex: Exec, P, ndim: int):
    """:func:`_prefill_pass` of one prompt (a batch of ones shaped to broadcast over ``ndim`` axes): it
    depends on the Exec and P alone, so a sweep's chunks along the batch axis share it."""
    return _PromptPrefill(*_prefill_pass(ex, np.ones((1,) * ndim), P))


