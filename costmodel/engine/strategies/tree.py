"""Token-tree verification (SpecInfer, Medusa, EAGLE, Sequoia).

A draft proposes a tree of T nodes; the target verifies the T nodes plus the root (q = T + 1) in
one pass with a tree mask. Tokens per step τ = 1 + Σ_v Π p_rank along v's path (:mod:`costmodel.engine.tree`).

Draft cost: a draft model, an EAGLE or an EAGLE-3 head drafts a tree of depth D in D passes, one at
the root and one over each of levels 1..D−1 (the last level is not drafted from); an EAGLE pass also
runs its 2d×d fusion layer, an EAGLE-3 head its 3d×d fc on the root's pass only
(:mod:`costmodel.engine.strategies.heads`). Medusa heads run inside the target pass, all
``medusa_heads`` of them (each a d×d ResBlock and a d×vocab LM head), and bound the tree's depth;
``none`` and ``suffix`` cost nothing. A runtime whose research code computes the tree attention
unfused (``Runtime.tree_attention_kernels_per_layer``) adds to the verification pass its extra
launches and the HBM traffic of the materialised scores (:func:`unfused_tree_attention_op`).
Verification kernels:

* ``dense_masked``:  the full q × (L + q) block is computed; context KV read once per sequence
* ``prefix_aware``:  only ancestor pairs inside the tree are computed; context KV read once
* ``per_branch``:    each root-to-leaf path runs as its own sequence: GEMMs see Σ path lengths tokens,
                     the context KV is read once per branch — re-reads hit L2 in proportion
                     min(1, L2 / working set), the working set being B·L·KV bytes of one layer —
                     and the attention kernel is launched once per branch.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel.engine import acceptance, memory
from costmodel.errors import InputError
from costmodel.inputs.model import Model
from costmodel.engine.execution import Exec
from costmodel.engine.ops import Op, PassShape, gemm, pairs_per_kv_token_bound
from costmodel.inputs.rules import medusa_heads
from costmodel.engine.roofline import RECORD_OPS, Cost, DeferredWork
from costmodel.fast.arrays import add_all
from costmodel.engine.pass_cost import pass_cost, work_summed_over_passes
from costmodel.engine.tree import Tree, TreeTable, candidate_table, full_tree, lockstep_tokens, optimal_tree, \
    validate_parents
from costmodel.engine.kv_reads import l2_hit_fraction
from costmodel.engine.strategies.common import Ctx, Outcome, prefill_cost, with_step_overhead, spec_method
from costmodel.engine.strategies.speculative import draft_memory, _draft_prefill, link_transfer, combine, named_passes, separate


def rank_vector(ctx: Ctx, depth_hint: int | None = None) -> tuple:
    r = ctx.rec
    if r.rank_acceptance is not None:
        return tuple(r.rank_acceptance)
    if r.acceptance_rate is not None:
        return acceptance.default_rank_acceptance(r.acceptance_rate)
    # only τ: the α a chain of the tree's depth would need (used only to pick a shape)
    d = depth_hint or 4
    a = float(acceptance.alpha_from_tau(min(r.mean_accepted_tokens, d + 1), d))
    return acceptance.default_rank_acceptance(a)


def build_tree(ctx: Ctx, n_nodes: int | None = None) -> Tree:
    r = ctx.rec
    if r.tree_parents is not None:
        return validate_parents(r.tree_parents)
    if r.tree_width is not None and r.tree_depth is not None and r.tree_nodes is None:
        return full_tree(r.tree_width, r.tree_depth)
    n = n_nodes or r.tree_nodes
    return optimal_tree(int(n), rank_vector(ctx, r.tree_depth), depth_bound(r))


def depth_bound(r):
    """An optimal tree's depth bound: ``tree_depth``, and for Medusa at most its heads (one per level)."""
    if r.draft_model != "medusa":
        return r.tree_depth
    heads = medusa_heads(r)
    return heads if r.tree_depth is None else min(r.tree_depth, heads)


def eagle_head(target: Model) -> Model:
    """EAGLE draft: one decoder layer of the target's width (Li et al. 2024); its 2d→d fusion layer is
    priced as an extra operator (:func:`eagle_fuse_op`), and it reuses the target's embedding and LM
    head (counted in the pass, not in its weights)."""
    return dataclasses.replace(target, id=f"eagle-head({target.id})", name="EAGLE head", n_layers=1,
                               n_experts=1, experts_per_token=1, tied_embeddings=True,
                               published_params=None, source="EAGLE (arXiv:2401.15077) draft head")


def eagle_exec(ex: Exec) -> Exec:
    """The EAGLE head on the target's tensor-parallel group: split over tp like the target's layers,
    and whole on one pipeline stage (pp = 1: its one layer is not divided among stages)."""
    return dataclasses.replace(ex, model=eagle_head(ex.model), pp=1)


def eagle_extra_params(target: Model) -> float:
    """EAGLE head weights: one dense layer (attention, a d_ff-wide FFN — the width :func:`eagle_head` runs,
    also for an MoE target —, 2 norms) + the 2d×d fusion matrix (LM head shared with the target)."""
    return target.attn_params_per_layer + target.dense_ffn_params + 2 * target.d_model + 2 * target.d_model ** 2


def eagle_fuse_op(ex: Exec, tokens) -> Op:
    """The fusion layer of each EAGLE draft pass: an FC of 2·d_model × d_model (split over tp) on the
    concatenated feature and token embedding of every token the pass drafts from (SafeAILab/EAGLE
    cnets.py ``self.fc = nn.Linear(2 * hidden_size, hidden_size)``)."""
    d = ex.model.d_model
    return gemm("eagle_fuse", 2.0 * d * d / ex.tp, tokens, 2 * d, d / ex.tp, ex, count=1)


def medusa_params(target: Model, n_heads: int) -> int:
    """Medusa head weights: per head a d×d ResBlock and a d×vocab LM head (Cai et al. 2024)."""
    return n_heads * (target.d_model ** 2 + target.d_model * target.vocab_size)


def medusa_ops(ex: Exec, n_heads: int, B) -> list:
    """Medusa heads on the last accepted hidden state (:func:`medusa_params`, split over tp): every
    head runs every step (FasterDecoding/Medusa medusa_model.py loops over all ``medusa_num_heads``),
    whatever the tree's depth."""
    m = ex.model
    params = medusa_params(m, n_heads) / ex.tp
    t = np.asarray(B, dtype=float)
    return [Op("medusa_heads", "matrix", 1, flops=2.0 * params * t,
               hbm_bytes=params * ex.w_bytes + t * n_heads * m.vocab_size / ex.tp * 4.0, group="heads")]


#: bytes per fp16 attention score an unfused attention moves through HBM beyond the fused kernel's
#: (act = 2 bytes): QKᵀ writes it (act), the scale reads and writes it (2·act), the mask add reads and
#: writes it (2·act), the fp32 softmax reads it and writes 4 bytes, the cast back reads 4 and writes
#: act, PV reads it (act): 8·act + 8
def unfused_score_bytes(act_bytes: float) -> float:
    return 8.0 * act_bytes + 8.0


def unfused_tree_attention_op(ex: Exec, B, q, L) -> Op | None:
    """The unfused attention of a tree verification pass in a runtime whose research code computes it
    op by op over the tree mask (``Runtime.tree_attention_kernels_per_layer`` = k; Medusa's
    modeling_llama_kv.py, vendored by EAGLE, Hydra, REST and Spec-Bench: matmul, / √d, + mask, fp32
    softmax, .to(fp16), matmul, transpose-contiguous) where plain decoding launches one fused kernel:
    per layer k − 1 more launches, and the B · (n_heads / tp) · q · (L + q) scores it materialises cross
    HBM :func:`unfused_score_bytes` times each. None when the runtime fuses it."""
    k = ex.rt.tree_attention_kernels_per_layer
    if k is None or k <= 1:
        return None
    m = ex.model
    scores = np.asarray(B, dtype=float) * ex.heads_per_device * q * (np.asarray(L, dtype=float) + q)
    extra = k - 1.0
    return Op("tree_attention_unfused", "vector", m.n_layers * extra,
              hbm_bytes=scores * unfused_score_bytes(ex.act_bytes) / extra)


def draft_pass_tokens(tr) -> np.ndarray:
    """Tokens per sequence of each draft pass of a tree of depth D: D passes, one at the root (it drafts
    level 1) and one on each level 1..D−1 (it drafts the next level); the last level is never drafted
    from (SafeAILab/EAGLE cnets.py topK_genrate: one forward before its loop of depth − 1 more).
    For a :class:`TreeTable`: (trees, deepest depth), row i = tree i's passes then 0 (no pass) past
    its depth — the level sizes shifted one column right, the root's 1 in front."""
    if isinstance(tr, TreeTable):
        levels = np.asarray(tr.level_sizes, dtype=float)
        passes = np.zeros_like(levels)
        if levels.shape[1]:
            passes[:, 0] = 1.0
            passes[:, 1:] = levels[:, :-1]
        passes[np.arange(levels.shape[1])[None, :] >= np.asarray(tr.depth)[:, None]] = 0.0
        return passes
    if tr.depth == 0:
        return np.zeros(0)
    return np.concatenate([[1.0], np.asarray(tr.level_sizes, dtype=float)[:-1]])


def verify_shape(ctx: Ctx, tr, kernel: str, extra_ops) -> PassShape:
    """The verification pass of tree ``tr`` (a :class:`Tree`, or a :class:`TreeTable`: arrays over trees)."""
    B, L = ctx.B, ctx.L
    q = tr.n_nodes + 1.0
    if kernel == "per_branch":
        n_br = tr.n_leaves
        ex = ctx.ex
        hit = l2_hit_fraction(ex, B * L)
        rereads = B * L * (n_br - 1.0)
        return PassShape(tokens=B * tr.path_tokens, pairs=B * tr.path_pairs + B * L * tr.path_tokens,
                         kv_hbm_tokens=B * L + rereads * (1.0 - hit), kv_l2_tokens=rereads * hit,
                         lm_tokens=B * tr.path_tokens, attn_kernels=n_br, kv_write_tokens=B * tr.path_tokens,
                         extra_ops=extra_ops)
    if kernel == "dense_masked":
        pairs, tail = B * q * (L + q), q * q
    else:
        pairs, tail = B * (q * L + tr.ancestor_pairs), tr.ancestor_pairs
    return PassShape(tokens=B * q, pairs=pairs, kv_hbm_tokens=B * L, lm_tokens=B * q, extra_ops=extra_ops,
                     max_pairs_per_kv_token=pairs_per_kv_token_bound(B, L, q, tail))


def alpha_for_tree_tau(tr: Tree, tau, iterations: int = 60) -> np.ndarray:
    """α whose rank model α(1 − α)^(i−1) gives the tree τ expected tokens (bisection: τ(α) increases
    with α); how a lock-step batch spreads a given τ over the tree's depths."""
    tau = np.asarray(tau, dtype=float)
    lo, hi = np.zeros_like(tau), np.ones_like(tau)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        got = np.vectorize(lambda a: tr.expected_tokens(acceptance.default_rank_acceptance(float(a))))(mid)
        above = got > tau
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return 0.5 * (lo + hi)


#: per-request α values beyond this many distinct ones are priced by interpolation on a grid of
#: this many points over [0, 1] (τ(α) is a polynomial of degree ≤ depth + ranks, smooth on the grid)
ALPHA_GRID_POINTS = 513


def tree_tokens_for_alphas(tr: Tree, alphas) -> np.ndarray:
    """τ of tree ``tr`` for each acceptance α in ``alphas`` under the rank model α(1 − α)^(i−1)
    (:meth:`Tree.expected_tokens` of :func:`acceptance.default_rank_acceptance`): exact for up to
    :data:`ALPHA_GRID_POINTS` distinct values, else linear interpolation between exact values on a
    grid of that many points (per-request acceptance under load: one α per request)."""
    a = np.asarray(alphas, dtype=float)

    def tau(x):
        return tr.expected_tokens(acceptance.default_rank_acceptance(float(x)))

    uniq, inv = np.unique(a, return_inverse=True)
    if uniq.size <= ALPHA_GRID_POINTS:
        return np.asarray([tau(x) for x in uniq])[inv].reshape(a.shape)
    grid = np.linspace(0.0, 1.0, ALPHA_GRID_POINTS)
    return np.interp(a, grid, np.asarray([tau(x) for x in grid]))


def tree_tokens_per_step(ctx: Ctx, tr) -> np.ndarray:
    """τ: given, or from the rank vector; lock-step batches use Σ_j P(accepted depth ≥ j)^B, the
    depth distribution of a given τ being that of the α whose rank model gives τ
    (:func:`alpha_for_tree_tau`; at B = 1 it returns τ).
    ``tr``: a :class:`Tree`, or a :class:`TreeTable` built for ``rank_vector(ctx)`` (one configuration:
    one batch size) — its columns give τ; a given τ under lock-step needs each tree's own α, so that
    case is computed tree by tree (this function on each of ``tr.trees``)."""
    given_tau = ctx.tau is not None and ctx.rec.rank_acceptance is None and ctx.rec.acceptance_rate is None
    lockstep = ctx.rec.batch_sync == "lockstep"
    if given_tau and not lockstep:
        return np.asarray(ctx.tau, dtype=float)
    if isinstance(tr, TreeTable):
        if given_tau:
            return np.asarray([np.ravel(tree_tokens_per_step(ctx, t))[0] for t in tr.trees])
        return tr.lockstep_tokens(ctx.B) if lockstep else tr.tokens
    if given_tau:
        tau = np.asarray(ctx.tau, dtype=float)
        alphas = alpha_for_tree_tau(tr, tau)
        tails = np.stack([tr.depth_tails(acceptance.default_rank_acceptance(float(a))) for a in np.ravel(alphas)],
                         axis=-1).reshape((-1,) + np.shape(tau))
        return np.sum(tails ** np.asarray(ctx.B, dtype=float), axis=0)
    ranks = rank_vector(ctx)
    if lockstep:
        return lockstep_tokens(tr.depth_tails(ranks), ctx.B)
    return np.asarray(tr.path_probabilities(ranks).sum())


def resolve_draft(ctx: Ctx, draft):
    """(draft Exec or None, kind) for a tree: a model, 'eagle', 'medusa' or 'none'."""
    kind = ctx.rec.draft_model
    if kind == "eagle":
        return eagle_exec(ctx.ex), "eagle"
    if kind == "eagle3":
        from costmodel.engine.strategies.heads import head_exec
        return head_exec(ctx.ex, kind, ctx.rec.draft_vocab_size), "eagle3"
    if kind in ("medusa", "none", "suffix"):
        return None, kind
    if kind == "self":
        return ctx.ex, "self"
    return draft, "model"


def draft_levels_cost(ctx: Ctx, d_ex, tr, kind: str = "model") -> Cost:
    """The draft's passes (:func:`draft_pass_tokens`): pass d = 0..D−1 runs over the n_d tokens per
    sequence it drafts from (n_0 = 1, the root; n_d = level d's size), B·n_d tokens attending to
    L_d + d positions (L_d: the draft's context), summed pass by pass. An EAGLE pass adds its 2d×d
    fusion layer (:func:`eagle_fuse_op`); an EAGLE-3 head its operators
    (:func:`costmodel.engine.strategies.heads.eagle3_ops`), the feature-fusing fc on the root's pass
    only. For a :class:`TreeTable` every (tree, pass) is priced in one array evaluation per kind of
    pass and the sums run pass by pass as for one tree (a pass past a tree's depth adds +0.0: no change)."""
    B = ctx.B
    Ld = ctx.L if ctx.draft_kv_budget is None else np.minimum(ctx.L, ctx.draft_kv_budget)

    def one_pass(n_d, d, first):
        t = B * n_d
        extra = []
        if kind == "eagle":
            extra = [eagle_fuse_op(d_ex, t)]
        elif kind == "eagle3":      # the fc over the features of the root pass's input tokens
            from costmodel.engine.strategies.heads import eagle3_ops
            extra = eagle3_ops(d_ex, t, t if first else 0.0)
        return PassShape(tokens=t, pairs=t * (Ld + d), kv_hbm_tokens=B * Ld, lm_tokens=t, extra_ops=extra,
                         max_pairs_per_kv_token=pairs_per_kv_token_bound(B, Ld, n_d, n_d * d))

    passes = draft_pass_tokens(tr)
    if not isinstance(tr, TreeTable):
        if kind in ("model", "self") and len(passes) > 1 and (np.ndim(B) or np.ndim(Ld)) and not RECORD_OPS.get():
            return _stacked_levels_cost(one_pass, passes, max(np.ndim(B), np.ndim(Ld)), d_ex)
        dcost = Cost.zero()
        for d, n_d in enumerate(passes):          # d: the depth the pass drafts from
            dcost = dcost + pass_cost(one_pass(n_d, d, d == 0), d_ex)
        return dcost
    rows, cols = np.nonzero(passes)
    n_trees, n_passes = passes.shape
    # one array evaluation per kind of pass (the root pass of an EAGLE-3 head has its fc), its
    # results placed back at their (tree, pass) cells
    groups = [np.ones(rows.shape, dtype=bool)] if kind != "eagle3" else [cols == 0, cols != 0]
    cells = {"time_s": np.zeros((n_trees, n_passes)), "flops": np.zeros((n_trees, n_passes)),
             "hbm_bytes": np.zeros((n_trees, n_passes))}
    by_bound = {}
    for sel in groups:
        if not sel.any():
            continue
        r, c = rows[sel], cols[sel]
        flat = pass_cost(one_pass(passes[r, c], c.astype(float), kind == "eagle3" and bool(c[0] == 0)), d_ex)
        for name in cells:
            cells[name][r, c] = np.broadcast_to(getattr(flat, name), r.shape)
        for b, v in flat.by_bound.items():
            by_bound.setdefault(b, np.zeros((n_trees, n_passes)))[r, c] = np.broadcast_to(v, r.shape)

    def summed(grid):
        total = np.zeros(n_trees)
        for d in range(n_passes):
            total = total + grid[:, d]
        return total

    return Cost(summed(cells["time_s"]), summed(cells["flops"]), summed(cells["hbm_bytes"]),
                {b: summed(v) for b, v in by_bound.items()}, [])


def _stacked_levels_cost(one_pass, passes, ndim: int, d_ex) -> Cost:
    """The draft passes of one tree over a sweep's arrays (no operator rows kept) as one array
    evaluation with a leading axis of passes (pass d's tokens n_d and depth d along it), then summed
    pass by pass from +0.0 as the loop over the passes adds their Costs: each element the same
    floating-point operations in the same order."""
    shape = (len(passes),) + (1,) * ndim
    flat = pass_cost(one_pass(np.asarray(passes, dtype=float).reshape(shape),
                              np.arange(len(passes), dtype=float).reshape(shape), False), d_ex)
    zero = Cost.zero().time_s

    def summed(a):
        a = np.asarray(a, dtype=float)
        if a.ndim <= ndim:                 # constant along the passes: broadcast back
            a = np.broadcast_to(a, shape[:1] + np.broadcast_shapes(a.shape, shape[1:]))
        return add_all(zero, (a[d] for d in range(len(passes))))

    def work():
        w = work_summed_over_passes(flat, len(passes), zero)
        return w if w is not None else (summed(flat.flops), summed(flat.hbm_bytes))

    return DeferredWork(summed(flat.time_s), lambda: {b: summed(v) for b, v in flat.by_bound.items()}, [], work)


def tree_step(ctx: Ctx, draft, tr):
    """(step cost, draft cost, verification cost, verification shape, draft Exec, draft kind) of tree
    ``tr`` (a :class:`Tree`, or a :class:`TreeTable`: then arrays over its trees)."""
    ex, B = ctx.ex, ctx.B
    d_ex, kind = resolve_draft(ctx, draft)
    extra = medusa_ops(ex, medusa_heads(ctx.rec), B) if kind == "medusa" else []
    unfused = unfused_tree_attention_op(ex, B, np.asarray(tr.n_nodes, dtype=float) + 1.0, ctx.L)
    if unfused is not None:
        extra = extra + [unfused]
    vs = verify_shape(ctx, tr, ctx.rec.attention_kernel, extra)
    verify = pass_cost(vs, ex)
    dcost = Cost.zero() if d_ex is None else draft_levels_cost(ctx, d_ex, tr, kind)
    n_nodes = np.asarray(tr.n_nodes, dtype=float)
    step = with_step_overhead(combine(ctx, dcost, verify, link_transfer(ctx, n_nodes)), ex, spec_method(ctx.rec.draft_model),
                              seqs=ctx.B)
    return step, dcost, verify, vs, d_ex, kind


def tree_outcome(ctx: Ctx, draft, tr: Tree) -> Outcome:
    """Tree ``tr`` priced: :func:`tree_step`, and memory — a separate draft device also holds the
    activations of its widest draft pass (:func:`draft_pass_tokens`)."""
    ex, B = ctx.ex, ctx.B
    step, dcost, verify, vs, d_ex, kind = tree_step(ctx, draft, tr)
    target = memory.target_breakdown(ex, B * ctx.L_peak, [memory.prefill_footprint(ex, B, ctx.P),
                                                          (vs.tokens, vs.lm_tokens, vs.pairs)], seqs=B)
    target["tree_scratch"] = memory.tree_scratch_bytes(ex, B, tr.n_nodes + 1.0)
    own = separate(ctx)
    widest = float(draft_pass_tokens(tr).max(initial=0.0))
    fp = memory.footprint(ex, target, _tree_draft_memory(ctx, d_ex, kind, tr), separate=own,
                          draft_activations=memory.activation_bytes(d_ex, B * widest, B * widest) if own else None)
    target_prefill = prefill_cost(ctx)
    d_prefill = _draft_prefill(ctx, d_ex) if kind == "model" else Cost.zero()
    return Outcome(step=step, tokens_per_step=np.asarray(tree_tokens_per_step(ctx, tr), dtype=float),
                   n_seqs=B, prefill=target_prefill + d_prefill, memory=fp,
                   passes=named_passes(ex, target_prefill, verify, d_ex, dcost, d_prefill if kind == "model" else None),
                   extras={"tree_nodes": tr.n_nodes, "tree_depth": tr.depth,
                           "tree_parents": list(tr.parents),
                           "draft_time_per_step_s": dcost.time_s, "verify_time_s": verify.time_s})


def _tree_draft_memory(ctx: Ctx, d_ex, kind: str, tr: Tree):
    """Draft weights and KV of a tree's draft (:class:`costmodel.engine.memory.DraftParts`): Medusa
    heads (``medusa_heads`` of them, split over tp, no KV); an EAGLE or EAGLE-3 head (split over tp, whole
    on one stage; its own layer's KV over the whole context); else :func:`draft_memory` over the context or
    the ``draft_kv_budget``."""
    ex = ctx.ex
    if kind == "medusa":
        total = medusa_params(ex.model, medusa_heads(ctx.rec)) * ex.w_bytes
        return memory.draft_breakdown(total / ex.tp, weights_total=total)
    if kind in ("eagle", "eagle3"):
        return draft_memory(ctx, d_ex, ctx.B * ctx.L_peak)
    kv_context = ctx.L_peak if ctx.draft_kv_budget is None else np.minimum(ctx.L_peak, ctx.draft_kv_budget)
    return draft_memory(ctx, d_ex, ctx.B * kv_context)


def tree(ctx: Ctx, draft) -> Outcome:
    """Tree strategy; ``tree_shape=optimal_for_hardware`` searches every tree that is optimal for some
    size <= tree_nodes and depth bound (<= tree_depth, else 16) for the best tokens per second on the
    hardware (Sequoia's hardware-aware optimiser: size and depth together)."""
    r = ctx.rec
    if r.tree_shape == "optimal_for_hardware":
        if r.tree_nodes is None:
            raise InputError("optimal_for_hardware needs a node budget", field="tree_nodes")
        if np.size(ctx.B) != 1:
            raise InputError("optimal_for_hardware trees are searched per configuration; sweep them one "
                             "row at a time", field="tree_shape")
        return tree_outcome(ctx, draft, best_for_hardware(ctx, draft))
    return tree_outcome(ctx, draft, build_tree(ctx))


def best_for_hardware(ctx: Ctx, draft) -> Tree:
    """The candidate tree with the most tokens per second, τ / step time (the first on a tie): all
    candidates priced at once as a :class:`TreeTable` (only their step: prefill and memory do not
    depend on the tree's choice), one configuration (every numeric field of ``ctx`` of size 1)."""
    r = ctx.rec
    one = dataclasses.replace(ctx, **{f.name: np.reshape(getattr(ctx, f.name), ())
                                       for f in dataclasses.fields(ctx)
                                       if isinstance(getattr(ctx, f.name), np.ndarray)})
    table = candidate_table(int(r.tree_nodes), rank_vector(ctx, r.tree_depth), depth_bound(r))
    step = tree_step(one, draft, table)[0]
    rate = tree_tokens_per_step(one, table) / step.time_s
    return table.trees[int(np.argmax(np.where(np.isnan(rate), -np.inf, rate)))]
