"""tree_shape=optimal_for_hardware prices every candidate tree in one array evaluation; each
candidate's tokens per second must equal, bit for bit, pricing that tree alone (tree_outcome),
so that the search picks the same tree as a loop over the candidates."""

import numpy as np
import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import _execs, make_ctx
from costmodel.engine.strategies.tree import best_for_hardware, depth_bound, rank_vector, tree_outcome, tree_step, \
    tree_tokens_per_step
from costmodel.engine.tree import candidate_table, candidate_trees, lockstep_tokens
from costmodel.inputs.record import parse_record

BASE = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=4, prompt_len=512, strategy="tree",
            draft_model="llama-68m", tree_nodes=24, acceptance_rate=0.7, tree_shape="optimal_for_hardware")

CASES = {
    "draft model": {},
    "eagle on t4": dict(hardware="t4", draft_model="eagle", tree_nodes=32),
    "medusa, lockstep, dense": dict(draft_model="medusa", batch_sync="lockstep", attention_kernel="dense_masked",
                                     batch_size=16, acceptance_rate=0.85),
    "per_branch, long context": dict(attention_kernel="per_branch", prompt_len=8000, batch_size=1),
    "separate device, overlap": dict(draft_placement="separate_device", draft_schedule="overlap", batch_size=8),
    "rank vector, depth bound": dict(rank_acceptance=(0.6, 0.2, 0.1), acceptance_rate=None, tree_depth=5,
                                     tree_nodes=40),
    "self draft with KV budget, tp=2": dict(draft_model="self", draft_kv_budget=256, n_devices=2,
                                            hardware="h100-sxm"),
    "none": dict(draft_model="none", batch_size=64),
    "eagle3, tp=2": dict(draft_model="eagle3", n_devices=2, hardware="h100-sxm", batch_size=8),
    # a record refuses τ with the search, but a table of trees still prices a given τ as each tree
    # alone does (lock-step: each tree's own α, tree by tree)
    "tau given, lockstep": dict(acceptance_rate=None, mean_accepted_tokens=2.5, batch_sync="lockstep",
                                draft_model="eagle", tree_nodes=16, tree_shape=None),
}


def _ctx(kw):
    rec = parse_record({k: v for k, v in dict(BASE, **kw).items() if v is not None})
    ex, draft = _execs(rec)
    return rec, make_ctx(rec, ex), draft


@pytest.mark.parametrize("name", CASES)
def test_every_candidate_rate_equals_pricing_it_alone(name):
    rec, ctx, draft = _ctx(CASES[name])
    table = candidate_table(int(rec.tree_nodes), rank_vector(ctx, rec.tree_depth), depth_bound(rec))
    step = tree_step(ctx, draft, table)[0]
    rates = tree_tokens_per_step(ctx, table) / step.time_s
    alone = []
    for tr in table.trees:
        out = tree_outcome(ctx, draft, tr)
        alone.append(float(np.ravel(out.tokens_per_step / out.step.time_s)[0]))
    assert len(table.trees) > 20
    assert rates.tolist() == alone                      # bit for bit, every candidate
    first_best = max(range(len(alone)), key=lambda i: (alone[i], -i))
    assert best_for_hardware(ctx, draft) == table.trees[first_best]


def test_search_result_is_the_chosen_trees_evaluation():
    kw = dict(BASE, hardware="t4", draft_model="eagle", tree_nodes=48)
    best = evaluate(kw)
    chosen = evaluate(dict({k: v for k, v in kw.items() if k not in ("tree_nodes", "tree_shape")},
                           tree_parents=best["tree_parents"]))
    for k, v in best.items():
        if k not in ("tree_parents",):
            assert chosen[k] == v or (v != v and chosen[k] != chosen[k]), k


def test_table_columns_hand_computed():
    # ranks p = (.5, .25, .125), budget 3 nodes: the optimal trees per (size, depth bound) are
    # (0,) (0,0) (0,1) (0,0,0) (0,0,1) — (0,1) and (0,0) tie at size 2 (1 + .5 + .25 both)
    table = candidate_table(3, (0.5, 0.25, 0.125), None)
    assert [t.parents for t in table.trees] == [(0,), (0, 0), (0, 1), (0, 0, 0), (0, 0, 1)]
    # (0,0,1): root -> a (rank 1, .5), root -> b (rank 2, .25), a -> c (rank 1, .5·.5 = .25)
    i = 4
    assert table.tokens[i] == 1 + 0.5 + 0.25 + 0.25
    assert table.level_sizes[i].tolist() == [2, 1]
    assert table.path_tokens[i] == 3 + 2                 # paths root-a-c and root-b
    assert table.path_pairs[i] == 3 * 4 / 2 + 2 * 3 / 2
    assert table.n_leaves[i] == 2.0
    assert table.ancestor_pairs[i] == 4 + (1 + 1 + 2)    # each token + its depth
    # the star (0,0,0) has one level of 3, three paths of 2 tokens
    assert table.level_sizes[3].tolist() == [3, 0] and table.path_pairs[3] == 3 * 3.0
    # lock-step, B = 2: Σ_j P(length >= j)^2; for (0,0,1): P(>=1) = .5 + .25, P(>=2) = .25
    expect = 1 + 0.75 ** 2 + 0.25 ** 2
    assert table.lockstep_tokens(np.asarray(2.0))[i] == expect
    assert float(lockstep_tokens(table.trees[i].depth_tails((0.5, 0.25, 0.125)), np.asarray(2.0))) == expect


def test_candidates_are_cached():
    assert candidate_trees(16, (0.7, 0.21), None) is candidate_trees(16, (0.7, 0.21), None)
    assert candidate_table(16, (0.7, 0.21), None) is candidate_table(16, (0.7, 0.21), None)
