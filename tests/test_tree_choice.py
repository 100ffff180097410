"""Which tree a record gets when it is not given node by node, by hand: an optimal tree for τ alone
uses the rank model of a chain of the tree's depth; a hardware-searched tree stays within its depth bound.

unit-model: 2 layers, d 64, 4 heads, 2 KV heads of 16, d_ff 128, vocab 1000 (256 B of KV per token).
"""

import importlib
import os

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import _execs, make_ctx
from costmodel.inputs.record import parse_record
from handcalc import UNIT, pass_s

tree_mod = importlib.import_module("costmodel.engine.strategies.tree")   # the module, not its function

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20, strategy="tree", attention_kernel="prefix_aware",
            draft_model="none")


def _tree(**kw):
    rec = parse_record(dict(BASE, **kw))
    ex, _draft = _execs(rec)
    return tree_mod.build_tree(make_ctx(rec, ex))


def test_a_tau_only_tree_takes_its_rank_model_from_a_chain_of_its_depth():
    # 2 nodes, τ = 1.9. With ranks p_i = α(1 − α)^(i−1) a chain (0, 1) adds α + α², two children (0, 0)
    # add α + α(1 − α) = 2α − α²: the chain wins by α(2α − 1), i.e. iff α > 1/2.
    # tree_depth 2: α from the chain of depth 2, 1 + α + α² = 1.9: α = (−1 + √4.6)/2 = 0.572 > 1/2
    assert (-1 + 4.6 ** 0.5) / 2 > 0.5
    assert _tree(tree_nodes=2, tree_depth=2, mean_accepted_tokens=1.9).parents == (0, 1)
    # no depth: the default chain of depth 4, α + α² + α³ + α⁴ = 0.9, and at α = 1/2 that sum is
    # 0.9375 > 0.9, so α < 1/2: two children
    assert 0.5 + 0.25 + 0.125 + 0.0625 > 0.9
    assert _tree(tree_nodes=2, mean_accepted_tokens=1.9).parents == (0, 0)


def test_the_hardware_search_keeps_the_depth_bound():
    # α = 0.9, at most 2 nodes, depth ≤ 1: the candidates are (0,) with τ = 1 + 0.9 = 1.9 and (0, 0) with
    # τ = 1 + 0.9 + 0.09 = 1.99; 2 sequences, L = 110, prefix-aware verification of q = 2 or 3 tokens
    # (ancestor pairs q + Σ depths: 3 and 5). Unbounded, the chain (0, 1) (τ = 1 + 0.9 + 0.81 = 2.71,
    # pairs 3 + 3 = 6) would beat both.
    one = 1.9 / pass_s(UNIT, 4, 2 * (2 * 110 + 3), 220)
    two = 1.99 / pass_s(UNIT, 6, 2 * (3 * 110 + 5), 220)
    chain = 2.71 / pass_s(UNIT, 6, 2 * (3 * 110 + 6), 220)
    assert one > two and chain > one
    kw = dict(BASE, acceptance_rate=0.9, tree_nodes=2, tree_shape="optimal_for_hardware")
    r = evaluate(dict(kw, tree_depth=1))
    assert (r["tree_parents"], r["tree_depth"]) == ([0], 1)
    assert r["tokens_per_s_per_seq"] == pytest.approx(one, rel=1e-12)
    r = evaluate(kw)
    assert (r["tree_parents"], r["tree_depth"]) == ([0, 1], 2)
    assert r["tokens_per_s_per_seq"] == pytest.approx(chain, rel=1e-12)
