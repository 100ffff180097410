"""Autoregressive decoding: one target pass with q = 1 per generated token."""

from __future__ import annotations

import numpy as np

from costmodel.engine import memory
from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.pass_memo import shared
from costmodel.engine.strategies.common import Ctx, Outcome, Pass, ctx_pass_key, decode_shape, prefill_cost, \
    with_step_overhead


@shared(ctx_pass_key)
def ar_decode_pass(ctx: Ctx, B=None, P=None):
    """The decoding pass: B sequences × 1 token over the mean context L = P + G/2."""
    B = ctx.B if B is None else np.asarray(B, dtype=float)
    P = ctx.P if P is None else np.asarray(P, dtype=float)
    L = P + ctx.G / 2.0
    return pass_cost(decode_shape(B, 1.0, L), ctx.ex)


def ar_step(ctx: Ctx, B=None, P=None):
    """The decoding step's Cost alone (evaluate's baseline for speedup_vs_ar needs nothing else):
    :func:`ar_decode_pass` plus the runtime's per-step overhead."""
    return with_step_overhead(ar_decode_pass(ctx, B, P), ctx.ex, seqs=ctx.B if B is None else B)


def autoregressive(ctx: Ctx, B=None, P=None) -> Outcome:
    """Step = one pass of B sequences × 1 token over the mean context L = P + G/2."""
    ex = ctx.ex
    B = ctx.B if B is None else np.asarray(B, dtype=float)
    P = ctx.P if P is None else np.asarray(P, dtype=float)
    L = P + ctx.G / 2.0
    decode = ar_decode_pass(ctx, B, P)
    step = with_step_overhead(decode, ex, seqs=B)
    target = memory.target_breakdown(ex, B * (P + ctx.G), [memory.prefill_footprint(ex, B, P),
                                                           (B, B, B * (L + 1))], seqs=B)
    prefill = prefill_cost(ctx, B, P)
    return Outcome(step=step, tokens_per_step=np.asarray(1.0), n_seqs=B,
                   prefill=prefill, memory=memory.footprint(ex, target),
                   passes={"prefill": Pass(prefill, ex), "decode": Pass(decode, ex)})
