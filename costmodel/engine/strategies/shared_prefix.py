"""Shared-prefix multi-branch decoding (parallel sampling; Hydragen / cascade attention).

``batch_size`` B prompts each continue ``n_branches`` n branches from a common prefix of
P_s = ``shared_prefix_len`` tokens (the whole prompt when 0); each branch also holds U unique
tokens (rest of the prompt plus its generated tokens), so B·n sequences decode with q = 1.

KV bytes read per layer per step (Hydragen §3; FlashInfer cascade):
  prefix_aware:  B·(P_s + n·U)                       prefix read once for all branches
  per_branch:    B·n·U + B·P_s·(1 + (n − 1)·(1 − h)) re-reads hit L2 with h = min(1, L2 / (B·P_s·kv_layer))
  dense_masked:  B·(P_s + n·U) read once, but every branch's query is scored against every branch's tokens
KV stored: B·(P_s + n·U) with prefix sharing (reported) vs B·n·(P_s + U) without (``kv_cache_bytes_unshared``).
The AR baseline decodes the same B·n sequences independently (prefix stored and read per sequence).
Host work per sequence (``host_per_seq_s``) is paid for each of the B·n branches: each samples and
streams its own token every step.
"""

from __future__ import annotations

import numpy as np

from costmodel.engine import memory
from costmodel.engine.ops import PassShape
from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.kv_reads import l2_hit_fraction
from costmodel.engine.strategies.common import Ctx, Outcome, Pass, prefill_cost, with_step_overhead


def prefix_len(ctx: Ctx):
    return np.where(ctx.shared_prefix_len > 0, ctx.shared_prefix_len, ctx.P)


def branch_shape(ctx: Ctx, kernel: str) -> PassShape:
    ex, B, n = ctx.ex, ctx.B, ctx.n_branches
    Ps = prefix_len(ctx)
    U = ctx.L - Ps                                   # unique tokens per branch (mean over decoding)
    seqs = B * n
    if kernel == "per_branch":
        hit = l2_hit_fraction(ex, B * Ps)
        rereads = B * Ps * (n - 1.0)
        return PassShape(tokens=seqs, pairs=seqs * (ctx.L + 1.0), kv_hbm_tokens=seqs * U + B * Ps + rereads * (1 - hit),
                         kv_l2_tokens=rereads * hit, lm_tokens=seqs)
    if kernel == "dense_masked":
        return PassShape(tokens=seqs, pairs=seqs * (Ps + n * U + 1.0), kv_hbm_tokens=B * (Ps + n * U),
                         lm_tokens=seqs)
    # prefix_aware: one batched prefix kernel + one suffix kernel (merged by log-sum-exp) per layer
    return PassShape(tokens=seqs, pairs=seqs * (ctx.L + 1.0), kv_hbm_tokens=B * (Ps + n * U), lm_tokens=seqs,
                     attn_kernels=2.0)


def shared_prefix(ctx: Ctx, draft=None) -> Outcome:
    ex, B, n = ctx.ex, ctx.B, ctx.n_branches
    Ps = prefix_len(ctx)
    shape = branch_shape(ctx, ctx.rec.attention_kernel)
    decode = pass_cost(shape, ex)
    step = with_step_overhead(decode, ex, seqs=B * n)       # host work per running sequence: every branch
    U_peak = ctx.L_peak - Ps
    stored = B * (Ps + n * U_peak)
    target = memory.target_breakdown(ex, stored, [memory.prefill_footprint(ex, B, ctx.P),
                                                  (shape.tokens, shape.lm_tokens, shape.pairs)])
    unshared = memory.kv_bytes(ex, B * n * ctx.L_peak) * ex.stage_devices * ex.pp
    prefill = prefill_cost(ctx)
    return Outcome(step=step, tokens_per_step=np.asarray(1.0), n_seqs=B * n, prefill=prefill,
                   memory=memory.footprint(ex, target),
                   extras={"kv_cache_bytes_unshared": unshared, "shared_prefix_len": Ps},
                   passes={"prefill": Pass(prefill, ex), "decode": Pass(decode, ex)})
