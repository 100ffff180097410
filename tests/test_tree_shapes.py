"""Token trees' shape numbers, acceptance, input checks and Sequoia's small optimal trees, by hand.

The worked tree: parents (0, 0, 1, 1, 2, 4), i.e. nodes 1 and 2 under the root, 3 and 4 under 1,
5 under 2, 6 under 4:

    depths 1 1 2 2 2 3    ranks 1 2 1 2 1 1    levels 2, 3, 1    leaves 3, 5, 6
"""

import re

import numpy as np
import pytest

from costmodel.errors import InputError
from costmodel.engine.tree import MAX_TREE_NODES, Tree, candidate_table, candidate_trees, full_tree, \
    lockstep_tokens, optimal_tree, ranks_for, tree_capacity, validate_parents

T = Tree((0, 0, 1, 1, 2, 4))
P = (0.6, 0.2)


def test_shape_numbers_of_the_worked_tree():
    assert T.n_nodes == 6 and T.depth == 3
    assert T.depths.tolist() == [1, 1, 2, 2, 2, 3]
    assert T.ranks.tolist() == [1, 2, 1, 2, 1, 1]
    assert T.level_sizes.tolist() == [2, 3, 1]
    # root-to-leaf paths, root included: 0-1-3, 0-2-5, 0-1-4-6
    assert sorted(T.leaf_path_lengths.tolist()) == [3, 3, 4]
    assert T.path_tokens == 3 + 3 + 4
    assert T.path_pairs == 3 * 4 / 2 + 3 * 4 / 2 + 4 * 5 / 2
    assert T.n_leaves == 3.0
    # each of the 7 tokens attends to itself and its ancestors: 7 + Σ depths (1+1+2+2+2+3)
    assert T.ancestor_pairs == 7 + 11


def test_a_tree_without_nodes_is_the_root_alone():
    t = Tree(())
    assert t.depth == 0 and t.level_sizes.tolist() == []
    assert t.leaf_path_lengths.tolist() == [1] and t.path_tokens == 1 and t.path_pairs == 1 and t.n_leaves == 1


def test_acceptance_along_the_paths_of_the_worked_tree():
    # Π p_rank along each path with p = (0.6, 0.2)
    prob = [1, 0.6, 0.2, 0.6 * 0.6, 0.6 * 0.2, 0.2 * 0.6, 0.6 * 0.2 * 0.6]
    assert T.path_probabilities(P).tolist() == pytest.approx(prob, rel=1e-15)
    assert T.expected_tokens(P) == pytest.approx(sum(prob), rel=1e-15)            # 2.472
    # P(accepted length >= j), j = 0..3: summed per depth
    tails = [1, 0.8, 0.36 + 0.12 + 0.12, 0.072]
    assert T.depth_tails(P).tolist() == pytest.approx(tails, rel=1e-15)
    # a rank beyond the list is never accepted: with p = (0.6,) only nodes 1 and 3 count
    assert T.expected_tokens((0.6,)) == pytest.approx(1 + 0.6 + 0.36, rel=1e-15)
    # no ranks at all: only the root
    assert T.expected_tokens(()) == 1.0 and Tree((0, 0)).expected_tokens(()) == 1.0


def test_lockstep_tokens_of_a_tree_over_batch_sizes():
    # Σ_j tails_j^B: B = 1 gives τ; B = 2 squares each tail
    tails = T.depth_tails(P)
    assert float(lockstep_tokens(tails, 1)) == pytest.approx(2.472, rel=1e-12)
    got = lockstep_tokens(tails, np.array([1.0, 2.0]))
    assert got.tolist() == pytest.approx([2.472, 1 + 0.64 + 0.36 + 0.072 ** 2], rel=1e-12)


# --------------------------------------------------------------------------- input checks
def test_parents_are_checked_with_the_field_and_the_allowed_range():
    with pytest.raises(InputError) as e:
        validate_parents([])
    assert str(e.value) == "field 'tree_parents': a tree needs at least one node" and e.value.field == "tree_parents"
    with pytest.raises(InputError, match=re.escape("too many nodes (1025)")) as e:
        validate_parents([0] * 1025)
    assert e.value.allowed == "at most 1024" and e.value.field == "tree_parents"
    for bad, node, shown in (([0, 2], 2, "2"), ([True], 1, "True"), ([-1], 1, "-1"), ([0, 1.0], 2, "1.0")):
        msg = f"parent of node {node} is {shown}; each parent must be an earlier node (0 = root, 1..{node - 1})"
        with pytest.raises(InputError, match=re.escape(msg)) as e:
            validate_parents(bad, field="spec.tree_parents")
        assert e.value.field == "spec.tree_parents"


def test_parents_may_be_numpy_integers_and_come_back_as_ints():
    t = validate_parents(np.array([0, 1, 1]))
    assert t.parents == (0, 1, 1) and all(type(p) is int for p in t.parents)
    assert len(validate_parents([0] * MAX_TREE_NODES).parents) == MAX_TREE_NODES


def test_full_trees_breadth_first():
    assert full_tree(2, 2).parents == (0, 0, 1, 1, 2, 2)
    assert full_tree(3, 1).parents == (0, 0, 0)
    assert full_tree(1, 3).parents == (0, 1, 2)
    assert full_tree(2, 0).parents == ()
    with pytest.raises(InputError, match=re.escape("a 4-ary tree of depth 5 has 1364 nodes")) as e:
        full_tree(4, 5)                                   # 4 + 16 + 64 + 256 + 1024
    assert e.value.field == "tree_width" and e.value.allowed == "at most 1024 nodes"


# --------------------------------------------------------------------------- Sequoia
def test_tree_capacity_and_the_ranks_it_needs():
    assert tree_capacity(2, 3, 100) == 2 + 4 + 8
    assert tree_capacity(2, 10, 5) == 2 + 4             # stops once the count reaches the cap
    assert tree_capacity(2, 10, 6) == 2 + 4
    assert tree_capacity(1, 4, 10) == 4
    # one rank holds a chain: 3 nodes in 2 levels need a second (zero-probability) rank
    assert ranks_for((0.5,), 3, 2) == (0.5, 0.0)
    assert ranks_for((0.5, 0.3), 3, 2) == (0.5, 0.3)
    assert ranks_for((), 2, 1) == (0.0, 0.0)
    assert ranks_for((0.5,), 2, 2) == (0.5,)


def test_small_optimal_trees_by_hand():
    # 2 nodes, p = (0.8, 0.1): a chain 1 + 0.8 + 0.64 = 2.44 beats a star 1 + 0.8 + 0.1 = 1.9 ...
    assert optimal_tree(2, (0.8, 0.1)).parents == (0, 1)
    # ... unless the depth is bound to 1
    assert optimal_tree(2, (0.8, 0.1), 1).parents == (0, 0)
    # 3 nodes, p = (0.5, 0.4): root's two children plus one under the first, 1 + 0.5 + 0.4 + 0.25 = 2.15,
    # beats 2.1 (the grandchild under the second), 1.95 (two under the first) and the chain 1.875
    t = optimal_tree(3, (0.5, 0.4))
    assert t.parents == (0, 0, 1) and t.expected_tokens((0.5, 0.4)) == pytest.approx(2.15, rel=1e-15)
    # depth 1 with two ranks: a third, never-accepted rank is added to place the third node
    assert optimal_tree(3, (0.5, 0.4), 1).parents == (0, 0, 0)
    # depth 2 with one rank: a chain of 2, then a zero-probability sibling
    t = optimal_tree(3, (0.5,), 2)
    assert t.n_nodes == 3 and t.depth == 2 and t.expected_tokens((0.5,)) == pytest.approx(1.75, rel=1e-15)


def test_candidate_trees_and_their_table_by_hand():
    p = (0.8, 0.1)
    # (n, d) = (1, 1): one node; (2, 1): a star; (2, 2): a chain
    assert [t.parents for t in candidate_trees(2, p)] == [(0,), (0, 0), (0, 1)]
    # one rank cannot hold 2 nodes in one level: no star
    assert [t.parents for t in candidate_trees(2, (0.8,))] == [(0,), (0, 1)]
    tab = candidate_table(2, p)
    assert tab.n_nodes.tolist() == [1, 2, 2] and tab.depth.tolist() == [1, 1, 2]
    assert tab.ancestor_pairs.tolist() == [2 + 1, 3 + 2, 3 + 3]
    assert tab.path_tokens.tolist() == [2, 2 + 2, 3]
    assert tab.path_pairs.tolist() == [3, 3 + 3, 6]
    assert tab.n_leaves.tolist() == [1, 2, 1]
    assert tab.level_sizes.tolist() == [[1, 0], [2, 0], [1, 1]]
    assert tab.tokens.tolist() == pytest.approx([1.8, 1.9, 2.44], rel=1e-15)
    assert tab.depth_tails.ravel().tolist() == pytest.approx([1, 0.8, 0, 1, 0.9, 0, 1, 0.8, 0.64], rel=1e-15)
    # lock-step at B = 2: Σ_j tails_j²
    assert tab.lockstep_tokens(2).tolist() == pytest.approx([1.64, 1.81, 1 + 0.64 + 0.4096], rel=1e-15)
    # a depth bound of 1 keeps the one-level trees
    assert [t.parents for t in candidate_trees(2, p, 1)] == [(0,), (0, 0)]
