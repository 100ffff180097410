"""Rules that tie record fields together, each written once.

Single fields (type, choices, range) are described in :mod:`costmodel.inputs.fields`; this module
holds what involves several fields:

* devices: ``tensor_parallel × pipeline_parallel = n_devices`` and ``pipeline_parallel | n_devices``;
  with ``expert_parallel`` > 1 it is every device of a stage (``expert_parallel = n_devices /
  pipeline_parallel``) and ``tensor_parallel`` divides it (the rest: attention data-parallel groups);
* ``shared_prefix_len <= prompt_len``;
* acceptance: speculative and tree strategies need α, τ (or rank acceptances) and a draft; a chain's
  τ lies in [1, γ + 1], a tree's in [1, depth + 1]; α and τ given together must agree within
  :data:`TAU_TOLERANCE` (5 %) of τ, where α implies τ = (1 − α^(γ+1)) / (1 − α) for a chain and
  τ = 1 + Σ_nodes Π_path p_rank for a tree;
* ``gamma_schedule``: only with speculation; α_1..α_γ cover its largest γ;
* tree shape: one of ``tree_width`` + ``tree_depth`` (full tree), ``tree_nodes`` [+ ``tree_depth`` as a
  bound] (optimal tree) or ``tree_parents`` (explicit), consistent with ``tree_shape``.

The numeric rules are functions of numbers *or numpy arrays* that return True where the rule is
broken: :func:`check` applies them to one record (``parse_record``) and :func:`grid_violations` to a
sweep's arrays, and the sweep re-parses the first offending row so that its message is
:func:`check`'s own.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import InputError
from costmodel.inputs.fields import DRAFT_KINDS, HEAD_DRAFTS, WEIGHTLESS_DRAFTS

#: α and τ given together may differ by this fraction of τ
TAU_TOLERANCE = 0.05
#: tree_shape=optimal_for_hardware searches every size up to tree_nodes: at most this many
MAX_HW_SEARCH_NODES = 256
SHAPES = "tree_width and tree_depth (full tree), tree_nodes [+ tree_depth as a bound] (optimal tree), " \
         "or tree_parents (explicit parent list)"


# ------------------------------------------------------------------ numeric rules (scalars or arrays)

def devices_disagree(tensor_parallel, pipeline_parallel, n_devices):
    """tensor_parallel × pipeline_parallel ≠ n_devices."""
    return tensor_parallel * pipeline_parallel != n_devices


def stages_do_not_divide(n_devices, pipeline_parallel):
    """pipeline_parallel does not divide n_devices."""
    return n_devices % pipeline_parallel != 0


def prefix_exceeds_prompt(shared_prefix_len, prompt_len):
    """shared_prefix_len > prompt_len."""
    return shared_prefix_len > prompt_len


def tau_exceeds_chain(mean_accepted_tokens, gamma):
    """τ > γ + 1: a chain of γ drafts gains at most γ accepted tokens plus the bonus token."""
    return mean_accepted_tokens > gamma + 1.0


def taus_disagree(implied_tau, tau):
    """|τ_implied − τ| > 5 % of τ: two acceptance figures that do not describe the same draft."""
    return np.abs(implied_tau - tau) > TAU_TOLERANCE * tau


def chain_taus_disagree(acceptance_rate, mean_accepted_tokens, gamma):
    """α and τ disagree for a chain: τ(α, γ) = (1 − α^(γ+1)) / (1 − α) (Leviathan) is more than 5 %
    away from the given τ."""
    from costmodel.engine.acceptance import chain_tokens_per_step
    return taus_disagree(chain_tokens_per_step(acceptance_rate, gamma), mean_accepted_tokens)


def positions_short(acceptance_by_position, gamma):
    """Fewer acceptance_by_position entries than γ: the later positions' acceptance is unknown."""
    return len(acceptance_by_position) < np.asarray(gamma)


def position_taus_disagree(acceptance_by_position, mean_accepted_tokens, gamma):
    """α_1..α_γ and τ disagree: τ = 1 + Σ_k Π_{i≤k} α_i is more than 5 % away from the given τ."""
    from costmodel.engine.acceptance import chain_tokens_by_position
    return taus_disagree(chain_tokens_by_position(acceptance_by_position, gamma), mean_accepted_tokens)


#: (fields read, strategies it applies to (None: all), the test) for the numeric rules a sweep can
#: vary; the devices rules read fields a sweep does not vectorise
NUMERIC_RULES = (
    (("shared_prefix_len", "prompt_len"), None, prefix_exceeds_prompt),
    (("mean_accepted_tokens", "gamma"), ("speculative",), tau_exceeds_chain),
    (("acceptance_rate", "mean_accepted_tokens", "gamma"), ("speculative",), chain_taus_disagree),
    (("acceptance_by_position", "gamma"), ("speculative",), positions_short),
    (("acceptance_by_position", "mean_accepted_tokens", "gamma"), ("speculative",), position_taus_disagree),
)


def context_exceeds_max(context_tokens, max_context):
    """prompt_len + gen_len > the model's max_context (the longest context it supports)."""
    return context_tokens > max_context


def model_max_context(rec):
    """The record's model's max_context (None when the model declares none)."""
    from costmodel.inputs.model import load_model
    return load_model(rec.model).max_context


def grid_rule_violations(rec, arrays: dict):
    """(rule, True where a grid row breaks it) for each numeric rule that reads a varying field, and
    the model's max_context for every row (prompt_len + gen_len, varying or not): ``rec`` supplies
    the fixed fields, ``arrays`` the varying ones (numpy arrays that broadcast together; ``rec``
    itself was checked by ``parse_record``)."""
    limit = model_max_context(rec)
    if limit is not None:
        ctx = (np.asarray(arrays.get("prompt_len", rec.prompt_len), dtype=float)
               + np.asarray(arrays.get("gen_len", rec.gen_len), dtype=float))
        yield context_exceeds_max, context_exceeds_max(ctx, limit)
    for names, strategies, broken in NUMERIC_RULES:
        if strategies is not None and rec.strategy not in strategies:
            continue
        if not set(names) & arrays.keys():
            continue
        vals = [arrays[n] if n in arrays else getattr(rec, n) for n in names]
        if any(v is None for v in vals):
            continue
        yield broken, broken(*vals)


def grid_violations(rec, arrays: dict):
    """True where a grid row breaks a numeric rule (:func:`grid_rule_violations`); None when no rule
    applies."""
    bad = None
    for _rule, b in grid_rule_violations(rec, arrays):
        bad = b if bad is None else (bad | b)
    return bad


# ------------------------------------------------------------------ one record

def check(r, src: str) -> None:
    """Raise InputError (naming the field and what is allowed) for the first broken rule of record ``r``."""
    a, tau = r.acceptance_rate, r.mean_accepted_tokens
    tp, pp = r.tensor_parallel, r.pipeline_parallel
    ep = r.expert_parallel or 1
    if ep > 1:
        check_expert_parallel(r, src)
    elif tp is not None and devices_disagree(tp, pp, r.n_devices):
        raise InputError(f"tensor_parallel {tp} × pipeline_parallel {pp} = {tp * pp} devices, but n_devices is "
                         f"{r.n_devices}", source=src, field="tensor_parallel",
                         allowed=f"n_devices = tensor_parallel × pipeline_parallel (e.g. n_devices={tp * pp})")
    if stages_do_not_divide(r.n_devices, pp):
        raise InputError(f"pipeline_parallel ({pp}) must divide n_devices ({r.n_devices})",
                         source=src, field="pipeline_parallel", value=pp)
    if prefix_exceeds_prompt(r.shared_prefix_len, r.prompt_len):
        raise InputError(f"shared_prefix_len ({r.shared_prefix_len}) exceeds prompt_len ({r.prompt_len})",
                         source=src, field="shared_prefix_len",
                         allowed=f"0..prompt_len = 0..{r.prompt_len} (0: the whole prompt is shared)")
    if r.strategy in ("speculative", "tree"):
        if a is None and tau is None and r.rank_acceptance is None and r.acceptance_by_position is None:
            raise InputError(f"strategy '{r.strategy}' needs an acceptance figure", source=src,
                             field="acceptance_rate",
                             allowed="acceptance_rate (α), mean_accepted_tokens (τ)"
                                     + (", or rank_acceptance" if r.strategy == "tree" else
                                        ", or acceptance_by_position (α_1..α_γ)"))
        if r.draft_model is None:
            raise InputError(f"strategy '{r.strategy}' needs a draft_model", source=src, field="draft_model",
                             allowed="a zoo id or path, or " + ", ".join(DRAFT_KINDS))
    if r.strategy == "speculative":
        if tau is not None and tau_exceeds_chain(tau, r.gamma):
            raise InputError(f"out of range: {tau}", source=src, field="mean_accepted_tokens",
                             allowed=f"1 <= τ <= gamma + 1 = {r.gamma + 1}")
        if tau is not None and a is not None and chain_taus_disagree(a, tau, r.gamma):
            from costmodel.engine.acceptance import chain_tokens_per_step
            implied = float(chain_tokens_per_step(a, r.gamma))
            raise InputError(f"acceptance_rate {a} implies τ = {implied:.3f} at gamma {r.gamma}, but "
                             f"mean_accepted_tokens is {tau}", source=src, field="mean_accepted_tokens",
                             allowed="give one of α and τ, or two that agree within 5%")
        if r.draft_model == "mtp" and r.draft_placement != "same_device":
            raise InputError("the MTP module is part of the target and runs on its devices", source=src,
                             field="draft_placement", allowed="same_device for draft_model=mtp")
        if r.draft_model == "medusa":
            raise InputError(f"draft_model '{r.draft_model}' proposes a tree", source=src, field="draft_model",
                             allowed="use strategy=tree for medusa, or a draft model / eagle / eagle3 / none / "
                                     "suffix / self for a chain")
        check_positions(r, src)
    elif r.acceptance_by_position is not None:
        raise InputError("acceptance_by_position describes a chain", source=src, field="acceptance_by_position",
                         allowed="strategy=speculative (a tree takes rank_acceptance)")
    check_draft_fields(r, src)
    check_schedule(r, src)
    if r.strategy == "tree":
        if r.draft_model == "mtp":
            raise InputError("draft_model 'mtp' drafts a chain (one token per MTP pass)", source=src,
                             field="draft_model", allowed="strategy=speculative for mtp; eagle, medusa, a draft "
                             "model, none or self for a tree")
        check_tree(r, src)


def check_schedule(r, src: str) -> None:
    """A gamma_schedule belongs to speculation (chains or trees); a chain's α_1..α_γ must cover the
    largest γ it names."""
    if r.gamma_schedule is None:
        return
    if r.strategy not in ("speculative", "tree"):
        raise InputError(f"gamma_schedule needs speculation, but strategy is '{r.strategy}'", source=src,
                         field="gamma_schedule", allowed="strategy=speculative or tree")
    from costmodel.inputs.schedule import max_gamma
    top = max_gamma(r.gamma_schedule)
    pos = r.acceptance_by_position
    if r.strategy == "speculative" and pos is not None and len(pos) < top:
        raise InputError(f"gamma_schedule reaches γ = {top} but acceptance_by_position gives {len(pos)} "
                         "position(s)", source=src, field="acceptance_by_position",
                         allowed=f"at least {top} probabilities α_1..α_γ")


def check_expert_parallel(r, src: str) -> None:
    """expert_parallel = n_devices / pipeline_parallel (every device of a stage holds experts) and
    tensor_parallel divides it (attention: tp-way tensor parallel × ep/tp data-parallel groups)."""
    ep, pp = r.expert_parallel, r.pipeline_parallel
    if stages_do_not_divide(r.n_devices, pp):
        raise InputError(f"pipeline_parallel ({pp}) must divide n_devices ({r.n_devices})",
                         source=src, field="pipeline_parallel", value=pp)
    stage = r.n_devices // pp
    if ep != stage:
        raise InputError(f"expert_parallel {ep} must span a pipeline stage's n_devices / pipeline_parallel = "
                         f"{stage} devices", source=src, field="expert_parallel",
                         allowed=f"1 or {stage} (or n_devices = {ep * pp} for expert_parallel {ep})")
    tp = r.tensor_parallel
    if tp is not None and ep % tp:
        raise InputError(f"tensor_parallel {tp} must divide expert_parallel {ep} (attention runs as "
                         f"{ep} / tensor_parallel data-parallel groups)", source=src, field="tensor_parallel",
                         allowed=", ".join(str(d) for d in range(1, ep + 1) if ep % d == 0))


def check_positions(r, src: str) -> None:
    """α_1..α_γ: at least γ of them, not with α, and agreeing with τ when both are given."""
    pos, tau = r.acceptance_by_position, r.mean_accepted_tokens
    if pos is None:
        return
    if r.acceptance_rate is not None:
        raise InputError("acceptance_rate (one α for every position) and acceptance_by_position disagree by "
                         "construction", source=src, field="acceptance_rate",
                         allowed="one of acceptance_rate and acceptance_by_position")
    if positions_short(pos, r.gamma):
        raise InputError(f"{len(pos)} acceptance(s) for gamma {r.gamma} draft positions", source=src,
                         field="acceptance_by_position",
                         allowed=f"at least gamma = {r.gamma} probabilities α_1..α_γ (or gamma={len(pos)})")
    if tau is not None and position_taus_disagree(pos, tau, r.gamma):
        from costmodel.engine.acceptance import chain_tokens_by_position
        implied = float(chain_tokens_by_position(pos, r.gamma))
        raise InputError(f"acceptance_by_position implies τ = {implied:.3f} at gamma {r.gamma}, but "
                         f"mean_accepted_tokens is {tau}", source=src, field="mean_accepted_tokens",
                         allowed="give one of acceptance_by_position and τ, or two that agree within 5%")


def check_draft_fields(r, src: str) -> None:
    """draft_tensor_parallel shards a draft model (not a head, ``none``, ``suffix`` or ``self``);
    draft_vocab_size belongs to an eagle3 head."""
    spec = r.strategy in ("speculative", "tree")
    if r.draft_tensor_parallel != 1 and (not spec or r.draft_model in HEAD_DRAFTS + WEIGHTLESS_DRAFTS):
        raise InputError(f"draft_tensor_parallel {r.draft_tensor_parallel} needs a draft model of its own",
                         source=src, field="draft_tensor_parallel",
                         allowed="1 (heads run on the target's tensor-parallel group; none, suffix and self have "
                                 "no separate weights), or a zoo id / path as draft_model")
    if r.draft_vocab_size is not None and not (spec and r.draft_model == "eagle3"):
        raise InputError("draft_vocab_size is the vocabulary of an EAGLE-3 head", source=src,
                         field="draft_vocab_size", allowed="draft_model=eagle3 (other drafts share the target's)")


def _full_tree_nodes(width: int, depth: int, cap: int) -> int:
    """Σ_{d=1..depth} width^d, stopping once it passes ``cap`` (width 64, depth 64 must not be built)."""
    n, level = 0, 1
    for _ in range(depth):
        level *= width
        n += level
        if n > cap:
            break
    return n


#: Medusa heads when a record does not say: the released Medusa-1 Vicuna-7B/13B/33B checkpoints
#: (FasterDecoding/medusa-vicuna-*-v1.3, config medusa_num_heads = 5); their default tree
#: mc_sim_7b_63 uses 4 of them
DEFAULT_MEDUSA_HEADS = 5


def medusa_heads(r) -> int:
    """The record's ``medusa_heads``, else :data:`DEFAULT_MEDUSA_HEADS`."""
    return DEFAULT_MEDUSA_HEADS if r.medusa_heads is None else int(r.medusa_heads)


def check_tree(r, src: str) -> None:
    """A tree's shape is given one way and is consistent; τ fits it; α or ranks and τ agree."""
    from costmodel.engine.acceptance import default_rank_acceptance
    from costmodel.engine.tree import full_tree, optimal_tree

    _check_tree_shape(r, src)
    tree, depth = _tree_and_depth(r, src)
    w, d, n, shape = r.tree_width, r.tree_depth, r.tree_nodes, r.tree_shape
    tau = r.mean_accepted_tokens
    if tau is not None and shape == "optimal_for_hardware":
        # the search compares tree sizes: a fixed τ would make the smallest tree always win
        raise InputError("tree_shape=optimal_for_hardware compares tree sizes by their expected tokens, which "
                         "a single mean_accepted_tokens cannot give", source=src, field="mean_accepted_tokens",
                         allowed="acceptance_rate (α) or rank_acceptance instead of τ")
    if tau is not None and not 1.0 <= tau <= depth + 1:
        raise InputError(f"out of range: {tau}", source=src, field="mean_accepted_tokens",
                         allowed=f"1 <= τ <= tree depth + 1 = {depth + 1}")
    ranks = r.rank_acceptance or (default_rank_acceptance(r.acceptance_rate) if r.acceptance_rate is not None
                                  else None)
    if tau is None or ranks is None:
        return
    given = "rank_acceptance" if r.rank_acceptance else "acceptance_rate"
    if tree is None:
        tree = full_tree(w, d) if w is not None else optimal_tree(int(n), tuple(ranks), d)
    implied = tree.expected_tokens(ranks)
    if taus_disagree(implied, tau):
        raise InputError(f"{given} implies τ = {implied:.3f} for this tree, but mean_accepted_tokens is {tau}",
                         source=src, field="mean_accepted_tokens",
                         allowed=f"give one of {given} and τ, or two that agree within 5%")


def _check_tree_shape(r, src: str) -> None:
    """The tree's shape is given one way: tree_parents alone, tree_width and tree_depth (full tree), or
    tree_nodes [+ tree_depth] (optimal tree), as ``tree_shape`` says."""
    w, d, n, parents = r.tree_width, r.tree_depth, r.tree_nodes, r.tree_parents
    if w is None and d is None and n is None and parents is None:
        raise InputError("a tree needs a shape", source=src, field="tree_nodes", allowed=SHAPES)
    if parents is not None and (w is not None or d is not None or n is not None):
        other = next(k for k, v in (("tree_width", w), ("tree_depth", d), ("tree_nodes", n)) if v is not None)
        raise InputError(f"tree_parents fixes the whole tree; {other} would be ignored", source=src,
                         field=other, allowed="give either tree_parents alone, or " + SHAPES.split(", or")[0])
    if w is not None and n is not None:
        raise InputError("tree_width (full tree) and tree_nodes (optimal tree for a node budget) describe "
                         "different trees", source=src, field="tree_width", allowed=SHAPES)
    if w is not None and d is None:
        raise InputError("a full tree needs both tree_width and tree_depth", source=src, field="tree_depth",
                         allowed=SHAPES)
    if d is not None and w is None and n is None:
        raise InputError("tree_depth alone is not a shape", source=src, field="tree_nodes", allowed=SHAPES)
    shape = r.tree_shape
    need = {"full": ("tree_width", w), "explicit": ("tree_parents", parents), "optimal": ("tree_nodes", n),
            "optimal_for_hardware": ("tree_nodes", n)}.get(shape)
    if need is not None and need[1] is None:
        raise InputError(f"tree_shape={shape} needs {need[0]}", source=src, field=need[0], allowed=SHAPES)
    if shape == "chain" and (w not in (None, 1)):
        raise InputError("tree_shape=chain has width 1", source=src, field="tree_width", value=w)
    if shape == "optimal_for_hardware" and n > MAX_HW_SEARCH_NODES:
        raise InputError(f"out of range: {n}", source=src, field="tree_nodes",
                         allowed=f"at most {MAX_HW_SEARCH_NODES} nodes for tree_shape=optimal_for_hardware "
                                 "(it searches every size up to tree_nodes)")


def _tree_and_depth(r, src: str) -> tuple:
    """(the explicit tree or None, the tree's depth): tree_parents validated, a full tree's node count
    bounded, an optimal tree's depth at most its node budget; with Medusa heads, at most one level per
    head (a fixed tree deeper than that is refused)."""
    from costmodel.engine.tree import MAX_TREE_NODES, validate_parents

    w, d, n, parents = r.tree_width, r.tree_depth, r.tree_nodes, r.tree_parents
    tree = None
    if parents is not None:
        try:
            tree = validate_parents(parents)
        except InputError as exc:
            raise InputError(str(exc).split(": ", 1)[-1], source=src, field="tree_parents") from None
        depth = tree.depth
    elif w is not None:
        nodes = _full_tree_nodes(w, d, MAX_TREE_NODES)
        if nodes > MAX_TREE_NODES:
            raise InputError(f"a {w}-ary tree of depth {d} has more than {MAX_TREE_NODES} nodes", source=src,
                             field="tree_width", allowed=f"at most {MAX_TREE_NODES} nodes in all")
        depth = d
    else:
        depth = n if d is None else min(n, d)
    if r.draft_model == "medusa" and (parents is not None or w is not None):
        heads = medusa_heads(r)
        if depth > heads:
            raise InputError(f"a tree of depth {depth} needs {depth} Medusa heads, but the target has {heads}",
                             source=src, field="tree_parents" if parents is not None else "tree_depth",
                             allowed=f"a tree at most medusa_heads = {heads} levels deep (or more medusa_heads)")
        depth = min(depth, heads)
    elif r.draft_model == "medusa":
        depth = min(depth, medusa_heads(r))
    return tree, depth
