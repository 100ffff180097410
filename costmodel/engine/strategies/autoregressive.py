"""Autoregressive decoding: one target pass with q = 1 per generated token."""

from __future__ import annotations

import numpy as np

from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.strategies.common import Ctx, Outcome, decode_shape, prefill_memory_pass, prefill_cost, target_memory, \
    with_step_overhead


def ar_step(ctx: Ctx, B=None, P=None):
    """The decoding step's Cost alone (evaluate's baseline for speedup_vs_ar needs nothing else)."""
    B = ctx.B if B is None else np.asarray(B, dtype=float)
    P = ctx.P if P is None else np.asarray(P, dtype=float)
    L = P + ctx.G / 2.0
    return with_step_overhead(pass_cost(decode_shape(B, 1.0, L), ctx.ex), ctx.ex)


def autoregressive(ctx: Ctx, B=None, P=None) -> Outcome:
    """Step = one pass of B sequences × 1 token over the mean context L = P + G/2."""
    ex = ctx.ex
    B = ctx.B if B is None else np.asarray(B, dtype=float)
    P = ctx.P if P is None else np.asarray(P, dtype=float)
    L = P + ctx.G / 2.0
    step = ar_step(ctx, B, P)
    mem = target_memory(ex, B * (P + ctx.G), [prefill_memory_pass(ctx, B, P),
                                             (B, B, B * (L + 1))], seqs=B)
    return Outcome(step=step, tokens_per_step=np.ones_like(step.time_s), n_seqs=B,
                   prefill=prefill_cost(ctx, B, P), memory=mem,
                   kv_total_bytes=mem["target_kv"] * ex.tp * ex.pp,
                   weights_total_bytes=ex.weight_bytes_total())
