"""Chain speculative decoding: γ sequential draft passes, then one target pass over γ+1 tokens.

Step time (draft on the target's device, or ``draft_schedule=serial`` on another device):
    T_step = γ·T_draft(B, 1, L_draft) + T_target(B, γ+1, L) [+ 2 token transfers when separate]
``draft_schedule=overlap`` (draft on its own device, two micro-batches in flight):
    T_step = max(γ·T_draft, T_target) + transfers
Tokens per step: Leviathan's (1 − α^(γ+1))/(1 − α), or τ as given; lock-step batches Σ α^(jB)
(see :mod:`costmodel.acceptance`). Draft kinds: a model (own weights and KV), ``self`` (the target
with a KV budget: reads all weights but only ``draft_kv_budget`` tokens of KV, MagicDec), ``none``
(n-gram / prompt lookup: no draft passes).
"""

from __future__ import annotations

import numpy as np

from .. import acceptance, memory
from ..parallel import transfer_time_s
from ..roofline import Cost, comm_cost, pass_cost
from .common import Ctx, Outcome, decode_shape, per_layer_scores_prefill, prefill_cost, target_memory, \
    with_step_overhead


def tokens_per_step(ctx: Ctx, gamma) -> np.ndarray:
    """τ per sequence per step: given τ, or from α; lock-step batches take the minimum."""
    if ctx.tau is not None:
        if ctx.rec.batch_sync == "lockstep":
            return acceptance.lockstep_tokens_per_step(acceptance.alpha_from_tau(ctx.tau, gamma), gamma, ctx.B)
        return np.broadcast_to(ctx.tau, np.broadcast(ctx.tau, gamma).shape).astype(float)
    if ctx.rec.batch_sync == "lockstep":
        return acceptance.lockstep_tokens_per_step(ctx.alpha, gamma, ctx.B)
    return acceptance.chain_tokens_per_step(ctx.alpha, gamma)


def draft_context(ctx: Ctx, L):
    return L if ctx.draft_kv_budget is None else np.minimum(L, ctx.draft_kv_budget)


def draft_pass_costs(ctx: Ctx, draft, n_passes, q_per_pass, L) -> Cost:
    """``n_passes`` sequential draft passes of q tokens per sequence each (draft = Exec or None)."""
    if draft is None:
        return Cost.zero(np.shape(ctx.B * ctx.P * ctx.G * ctx.gamma))
    Ld = draft_context(ctx, L)
    return pass_cost(decode_shape(ctx.B, q_per_pass, Ld), draft).scale(n_passes)


def link_transfer(ctx: Ctx, draft_tokens_per_seq) -> Cost:
    """Draft token ids to the target and accepted ids back (int32 each) over the placement's link."""
    place = ctx.rec.draft_placement
    if place == "same_device":
        return Cost.zero()
    hw = ctx.ex.hw
    link = hw.network if place == "separate_node" else hw.scale_up
    out = transfer_time_s(ctx.B * draft_tokens_per_seq * 4.0, link)
    back = transfer_time_s(ctx.B * (draft_tokens_per_seq + 1) * 4.0, link)
    return comm_cost(out + back)


def combine(ctx: Ctx, draft_cost: Cost, verify: Cost, transfer: Cost) -> Cost:
    if ctx.rec.draft_placement != "same_device" and ctx.rec.draft_schedule == "overlap":
        # the slower side sets the pace; attribute the step to it
        d_slow = draft_cost.time_s > verify.time_s
        t = np.maximum(draft_cost.time_s, verify.time_s)
        by = {b: np.where(d_slow, draft_cost.by_bound[b], verify.by_bound[b]) for b in verify.by_bound}
        step = Cost(t, draft_cost.flops + verify.flops, draft_cost.hbm_bytes + verify.hbm_bytes, by,
                    draft_cost.ops + verify.ops)
        return step + transfer
    return draft_cost + verify + transfer


def draft_memory(ctx: Ctx, draft, kv_tokens) -> dict:
    """Draft weights and KV on the device that runs it (``self`` shares the target's weights)."""
    if draft is None:
        return {"draft_weights": np.asarray(0.0), "draft_kv": np.asarray(0.0)}
    w = 0.0 if ctx.rec.draft_model == "self" else draft.weight_bytes_device()
    return {"draft_weights": np.asarray(w), "draft_kv": np.asarray(kv_tokens, dtype=float) * draft.kv_bytes_per_token_device}


def speculative(ctx: Ctx, draft) -> Outcome:
    ex, B, L, g = ctx.ex, ctx.B, ctx.L, ctx.gamma
    n_draft_passes = 0.0 if draft is None else g
    dcost = draft_pass_costs(ctx, draft, n_draft_passes, 1.0, L)
    verify = pass_cost(decode_shape(B, g + 1.0, L), ex)
    step = with_step_overhead(combine(ctx, dcost, verify, link_transfer(ctx, g)), ex)
    tps = tokens_per_step(ctx, g)
    # target KV holds the context plus γ+1 speculative slots per sequence
    kv_tokens = B * (ctx.L_peak + g + 1.0)
    mem = target_memory(ex, kv_tokens, [(B * np.maximum(ctx.P, 1), B, per_layer_scores_prefill(ctx)),
                                        (B * (g + 1), B * (g + 1), B * (g + 1) * (L + g + 1))])
    d_kv_tokens = B * (draft_context(ctx, ctx.L_peak) + g)
    dmem = draft_memory(ctx, draft, d_kv_tokens)
    other = None
    if ctx.rec.draft_placement == "same_device":
        mem.update(dmem)
    else:
        other = dict(dmem, activations=memory.activation_bytes(draft, B, B) if draft is not None else 0.0,
                     runtime_overhead=np.asarray(ex.rt.memory_overhead_bytes))
    kv_total = mem["target_kv"] * ex.tp * ex.pp + dmem["draft_kv"]
    w_total = ex.model.n_params * ex.w_bytes + dmem["draft_weights"]
    return Outcome(step=step, tokens_per_step=tps, n_seqs=B * np.ones_like(step.time_s),
                   prefill=prefill_cost(ctx) + _draft_prefill(ctx, draft), memory=mem, other_device_memory=other,
                   kv_total_bytes=kv_total, weights_total_bytes=w_total,
                   extras={"draft_time_per_step_s": dcost.time_s, "verify_time_s": verify.time_s})


def _draft_prefill(ctx: Ctx, draft) -> Cost:
    """The draft model also processes the prompt (its own KV cache); ``self``/``none`` do not."""
    if draft is None or ctx.rec.draft_model == "self":
        return Cost.zero()
    from .common import prefill_shape
    return pass_cost(prefill_shape(ctx.B, ctx.P), draft)
