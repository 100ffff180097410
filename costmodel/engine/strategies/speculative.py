"""Chain speculative decoding: γ sequential draft passes, then one target pass over γ+1 tokens.

Step time (draft on the target's device, or ``draft_schedule=serial`` on another device):
    T_step = γ·T_draft(B, 1, L_draft) + T_target(B, γ+1, L) [+ X, the token transfers, when separate]
``draft_schedule=overlap`` (a draft model on its own device; see :func:`combine`): the cheapest of
    serial;  look-ahead  p·max(D, V) + (1 − p)·(D + V) + X  with p = α^(γ·B);
    two half-batches in flight (B ≥ 2)  max(2·D½, 2·V½, D½ + V½ + X½)
where D = γ·T_draft, V = T_target and ½ marks a half batch.
Tokens per step: Leviathan's (1 − α^(γ+1))/(1 − α), or τ as given; lock-step batches Σ α^(jB)
(see :mod:`costmodel.engine.acceptance`); with ``acceptance_by_position`` τ = 1 + Σ_k Π_{i≤k} α_i.
Draft kinds: a model (own weights and KV, sharded over ``draft_tensor_parallel`` devices with its own
all-reduces), ``self`` (the target with a KV budget: reads all weights but only ``draft_kv_budget``
tokens of KV, MagicDec), ``eagle`` / ``eagle3`` (a one-layer head on the target's features, γ passes
on the target's devices, as vLLM and SGLang run EAGLE chains; EAGLE-3's head:
:mod:`costmodel.engine.strategies.heads`), ``none`` (n-gram / prompt lookup: no draft passes),
``mtp`` (the target's multi-token-prediction module, DeepSeek-V3: each of the γ passes runs one decoder layer + the 2d×d projection + the shared LM
head on the target's devices, its one layer of KV beside the target's; one module serves every
position, as vLLM and SGLang reuse it for γ > num_nextn_predict_layers) and
``suffix`` (SuffixDecoding, Oliaro et al., arXiv:2411.04975: suffix-tree drafting on the CPU, no GPU
draft passes; its draft length varies per step up to γ = γ_max, τ is the chain's at γ_max and the
verification is priced at the γ_max + 1 tokens it may carry; the CPU lookup time is not priced — the
output's notes say so).
"""

from __future__ import annotations

import numpy as np

from costmodel.engine import acceptance
from costmodel.engine import memory
from costmodel.engine.ops import mtp_projection_op
from costmodel.engine.parallel import draft_link, transfer_time_s
from costmodel.engine.roofline import RECORD_OPS, Cost, comm_cost
from costmodel.inputs.fields import WEIGHTLESS_DRAFTS
from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.pass_memo import exec_key, shared, value_key
from costmodel.engine.strategies.common import Ctx, Outcome, Pass, chain_verify_shape, decode_shape, prefill_cost, \
    prefill_passes, with_step_overhead, spec_method


def tokens_per_step(ctx: Ctx, gamma) -> np.ndarray:
    """τ per sequence per step: given τ, or from α (or α_1..α_γ); lock-step batches take the minimum."""
    pos = ctx.rec.acceptance_by_position
    if pos is not None and ctx.tau is None:
        if ctx.rec.batch_sync == "lockstep":
            return acceptance.lockstep_tokens_by_position(pos, gamma, ctx.B)
        return acceptance.chain_tokens_by_position(pos, gamma)
    if ctx.tau is not None:
        if ctx.rec.batch_sync == "lockstep":
            return acceptance.lockstep_tokens_per_step(acceptance.alpha_from_tau(ctx.tau, gamma), gamma, ctx.B)
        return np.broadcast_to(ctx.tau, np.broadcast(ctx.tau, gamma).shape).astype(float)
    if ctx.rec.batch_sync == "lockstep":
        return acceptance.lockstep_tokens_per_step(ctx.alpha, gamma, ctx.B)
    return acceptance.chain_tokens_per_step(ctx.alpha, gamma)


def draft_context(ctx: Ctx, L):
    return L if ctx.draft_kv_budget is None else np.minimum(L, ctx.draft_kv_budget)


@shared(lambda ctx, draft, n_passes, q_per_pass, L, B=None: (
    _draft_key(ctx, draft), value_key(n_passes), value_key(q_per_pass), value_key(L), value_key(ctx.B if B is None else B),
    value_key(ctx.gamma), value_key(ctx.draft_kv_budget)))
def draft_pass_costs(ctx: Ctx, draft, n_passes, q_per_pass, L, B=None) -> Cost:
    """``n_passes`` sequential draft passes of q tokens per sequence each (draft = Exec or None).
    An EAGLE-3 head's first pass also runs its fc over the B·q tokens that carry target features
    (:func:`costmodel.engine.strategies.heads.eagle3_ops`); every EAGLE-1 pass its 2d → d fusion layer
    (:func:`costmodel.engine.strategies.heads.eagle_ops`), as a tree's passes do."""
    B = ctx.B if B is None else B
    if draft is None:
        return Cost.zero(np.shape(B * ctx.P * ctx.G * ctx.gamma))
    Ld = draft_context(ctx, L)
    if ctx.rec.draft_model == "eagle3":
        from costmodel.engine.strategies.heads import eagle3_ops
        t = np.asarray(B, dtype=float) * q_per_pass
        first = pass_cost(decode_shape(B, q_per_pass, Ld, eagle3_ops(draft, t, t)), draft)
        rest = pass_cost(decode_shape(B, q_per_pass, Ld, eagle3_ops(draft, t, 0.0)), draft)
        return first + rest.scale(np.asarray(n_passes, dtype=float) - 1.0)
    extra = None
    if ctx.rec.draft_model == "mtp":
        extra = [mtp_projection_op(draft, B * q_per_pass)]
    elif ctx.rec.draft_model == "eagle":
        from costmodel.engine.strategies.heads import eagle_ops
        extra = eagle_ops(draft, np.asarray(B, dtype=float) * q_per_pass)
    return pass_cost(decode_shape(B, q_per_pass, Ld, extra), draft).scale(n_passes)


def separate(ctx: Ctx) -> bool:
    """The draft is a model running on its own device: a placement other than ``same_device`` and a
    draft that has weights of its own (``none``, ``suffix``, ``medusa`` and ``self`` have nothing to move)."""
    return ctx.rec.draft_placement != "same_device" and ctx.rec.draft_model not in WEIGHTLESS_DRAFTS


def link_transfer(ctx: Ctx, draft_tokens_per_seq, B=None) -> Cost:
    """X: k draft token ids to the target, then k + 1 ids (accepted + bonus, an upper bound) back,
    4 B each, α + S/β per message over :func:`costmodel.engine.parallel.draft_link`. An EAGLE head also needs
    the target's hidden states of those tokens: (k + 1)·d_model·act_bytes more on the way back (an
    EAGLE-3 head three layers' states: 3·(k + 1)·d_model·act_bytes)."""
    if not separate(ctx):
        return Cost.zero()
    B = ctx.B if B is None else B
    ex = ctx.ex
    link = draft_link(ex.hw, ex.stage_devices * ex.pp, ctx.rec.draft_placement)
    k = np.asarray(draft_tokens_per_seq, dtype=float)
    out = transfer_time_s(B * k * 4.0, link)
    back_bytes = B * (k + 1.0) * 4.0
    if ctx.rec.draft_model in ("eagle", "eagle3"):
        layers = 3.0 if ctx.rec.draft_model == "eagle3" else 1.0
        back_bytes = back_bytes + layers * B * (k + 1.0) * ex.model.d_model * ex.act_bytes
    return comm_cost(out + transfer_time_s(back_bytes, link))


def lookahead_probability(ctx: Ctx):
    """p: chance that a draft which kept drafting during verification (assuming all γ tokens of every
    sequence accepted) drafted on the right prefix: α^(γ·B) for a chain (one batched draft pass serves
    every sequence, so any rejection forces a serial redraft); 0 for trees (not priced)."""
    if ctx.rec.strategy != "speculative":
        return np.asarray(0.0)
    pos = ctx.rec.acceptance_by_position
    if pos is not None and ctx.tau is None:       # Π_{i≤γ} α_i per sequence: row j = γ of the survival
        surv = acceptance.position_survival(pos, ctx.gamma)
        j = np.arange(surv.shape[0]).reshape((-1,) + (1,) * (surv.ndim - 1))
        return np.sum(np.where(j == ctx.gamma, surv, 0.0), axis=0) ** ctx.B
    a = ctx.alpha if ctx.alpha is not None else acceptance.alpha_from_tau(ctx.tau, ctx.gamma)
    return np.asarray(a, dtype=float) ** (ctx.gamma * ctx.B)


def _retimed(cost: Cost, t) -> Cost:
    """``cost``'s work with its time set to ``t``, the per-bound attribution scaled to match."""
    f = np.where(cost.time_s > 0, np.asarray(t, dtype=float) / np.maximum(cost.time_s, 1e-300), 0.0)
    return Cost(np.asarray(t, dtype=float), cost.flops, cost.hbm_bytes,
                {b: v * f for b, v in cost.by_bound.items()}, cost.ops)


def combine(ctx: Ctx, draft_cost: Cost, verify: Cost, transfer: Cost, halves=None) -> Cost:
    """One step from its draft work D, verification V and transfers X.

    Serial (same device, or ``draft_schedule=serial``): D + V + X. With ``overlap`` and a draft on
    its own device, the cheapest schedule the dependencies allow:

    * look-ahead (PEARL-style): the draft keeps drafting while the target verifies; its work is
      usable with probability p (:func:`lookahead_probability`):  p·max(D, V) + (1 − p)·(D + V) + X;
    * two half-batches in flight (B ≥ 2, only when ``halves`` = (D½, V½, X½) is given): the draft
      device serves both halves, so does the target, and each half waits for its own draft:
      max(2·D½, 2·V½, D½ + V½ + X½) — it beats serial only when half-batch passes are cheaper than
      full ones (compute-bound), never at small memory-bound batches.
    """
    serial = draft_cost + verify + transfer
    if not (separate(ctx) and ctx.rec.draft_schedule == "overlap"):
        return serial
    d, v, x = draft_cost.time_s, verify.time_s, transfer.time_s
    p = lookahead_probability(ctx)
    t = np.minimum(serial.time_s, p * np.maximum(d, v) + (1.0 - p) * (d + v) + x)
    if halves is None:
        return _retimed(serial, t)
    dh, vh, xh = halves
    half = dh + vh + xh
    t_pp = np.maximum(np.maximum(2.0 * dh.time_s, 2.0 * vh.time_s), half.time_s)
    use_pp = (np.asarray(ctx.B) >= 2) & (t_pp < t)
    t = np.where(use_pp, t_pp, t)
    step = _retimed(serial, t)
    step.flops = np.where(use_pp, 2.0 * (dh.flops + vh.flops), serial.flops)
    step.hbm_bytes = np.where(use_pp, 2.0 * (dh.hbm_bytes + vh.hbm_bytes), serial.hbm_bytes)
    return step


def draft_memory(ctx: Ctx, draft, kv_tokens) -> memory.DraftParts:
    """Draft weights and KV (:func:`costmodel.engine.memory.draft_breakdown`, per device and totals) of
    a draft model (its own weights on each of its tp·pp devices: total = per-device · tp·pp), an
    EAGLE or EAGLE-3 head (:func:`costmodel.engine.strategies.heads.head_weights_bytes` per device of
    the target's tp group, ``head_weights_total_bytes`` over it), ``self`` (the target's weights, its
    own KV) or ``none`` (draft = None: nothing). KV totals: per device · the draft Exec's tp·pp."""
    if draft is None:
        return memory.draft_breakdown()
    kind = ctx.rec.draft_model
    if kind == "mtp":
        return memory.draft_breakdown(memory.mtp_weights_device_bytes(draft), draft, kv_tokens, ctx.B)
    if kind in ("eagle", "eagle3"):
        from costmodel.engine.strategies.heads import head_weights_bytes, head_weights_total_bytes
        vocab = ctx.rec.draft_vocab_size
        return memory.draft_breakdown(head_weights_bytes(ctx.ex, kind, vocab), draft, kv_tokens, ctx.B,
                                      weights_total=head_weights_total_bytes(ctx.ex, kind, vocab))
    if kind == "self":
        return memory.draft_breakdown(0.0, draft, kv_tokens, ctx.B)
    own = memory.weights_device_bytes(draft)
    return memory.draft_breakdown(own, draft, kv_tokens, ctx.B, weights_total=own * (draft.tp * draft.pp))


def speculative(ctx: Ctx, draft) -> Outcome:
    ex, B, L, g = ctx.ex, ctx.B, ctx.L, ctx.gamma
    if ctx.rec.draft_model == "self":
        draft = ex                       # the target's own Exec (carries its all-reduce algorithm)
    elif ctx.rec.draft_model in ("eagle", "eagle3"):
        from costmodel.engine.strategies.heads import head_exec
        draft = head_exec(ex, ctx.rec.draft_model, ctx.rec.draft_vocab_size)
    n_draft_passes = 0.0 if draft is None else g
    dcost = draft_pass_costs(ctx, draft, n_draft_passes, 1.0, L)
    verify = pass_cost(chain_verify_shape(B, g + 1.0, L, ex.rt.spec_scorer), ex)
    halves = None
    if separate(ctx) and ctx.rec.draft_schedule == "overlap":
        Bh = np.maximum(np.ceil(B / 2.0), 1.0)
        halves = (draft_pass_costs(ctx, draft, n_draft_passes, 1.0, L, B=Bh),
                  pass_cost(chain_verify_shape(Bh, g + 1.0, L, ex.rt.spec_scorer), ex), link_transfer(ctx, g, B=Bh))
    step = with_step_overhead(combine(ctx, dcost, verify, link_transfer(ctx, g), halves), ex, spec_method(ctx.rec.draft_model), seqs=ctx.B)
    tps = tokens_per_step(ctx, g)
    # target KV holds the context plus γ+1 speculative slots per sequence
    kv_tokens = B * (ctx.L_peak + g + 1.0)
    target = memory.target_breakdown(ex, kv_tokens, [memory.prefill_footprint(ex, B, ctx.P),
                                                     (B * (g + 1), B * (g + 1), B * (g + 1) * (L + g + 1))], seqs=B)
    d_kv_tokens = B * (draft_context(ctx, ctx.L_peak) + g)
    own = separate(ctx)
    fp = memory.footprint(ex, target, draft_memory(ctx, draft, d_kv_tokens), separate=own,
                          draft_activations=memory.activation_bytes(draft, B, B) if own else None)
    prefill, d_prefill = prefill_cost(ctx), _draft_prefill(ctx, draft)
    return Outcome(step=step, tokens_per_step=tps, n_seqs=B, prefill=prefill + d_prefill, memory=fp,
                   extras={"draft_time_per_step_s": dcost.time_s, "verify_time_s": verify.time_s},
                   passes=named_passes(ex, prefill, verify, draft, dcost,
                                       None if ctx.rec.draft_model == "self" else d_prefill))


def named_passes(ex, prefill: Cost, verify: Cost, draft=None, dcost: Cost | None = None,
                 d_prefill: Cost | None = None) -> dict:
    """The passes of a speculative or tree step by name (``draft`` = the draft's Exec or None;
    ``d_prefill`` = a draft model's own prompt processing, None when the draft keeps no prompt)."""
    passes = {"prefill": Pass(prefill, ex)}
    if draft is not None:
        if d_prefill is not None:
            passes["draft_prefill"] = Pass(d_prefill, draft)
        passes["draft"] = Pass(dcost, draft)
    passes["verify"] = Pass(verify, ex)
    return passes


@shared(lambda ctx, draft: _draft_key(ctx, draft))
def _draft_prefill(ctx: Ctx, draft) -> Cost:
    """The draft model also processes the prompt (its own KV cache), in passes shaped as the runtime
    shapes the target's (:func:`~costmodel.engine.strategies.common.prefill_passes`: one prompt per
    pass, chunks) within the same prefill step (no step overhead of its own); ``self``/``none``/
    ``suffix`` do not; an EAGLE head does, over the target's features (its layer's KV)."""
    if draft is None or ctx.rec.draft_model == "self":
        return Cost.zero()
    return prefill_passes(draft, ctx.B, ctx.P)


def _draft_key(ctx: Ctx, draft) -> tuple:
    """What a draft pass reads besides its own arguments (engine.pass_memo): the draft's Exec, the
    kind of draft, the record's B, P and G, and whether operator rows are kept."""
    return (None if draft is None else exec_key(draft), ctx.rec.draft_model, value_key(ctx.B), value_key(ctx.P),
            value_key(ctx.G), RECORD_OPS.get())
