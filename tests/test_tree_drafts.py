"""Tree strategy pieces by hand on the unit model: draft passes per level, the EAGLE and Medusa heads'
weights and operators, the α that gives a tree its τ, τ for many per-request α, and the input checks.

unit-model: 2 layers, d 64, 4 heads, 2 KV heads of 16, d_ff 128 (gated), vocab 1000, fp16.
"""

import dataclasses
import importlib
import os

import numpy as np
import pytest

from costmodel.errors import InputError
from costmodel.engine.evaluate import _execs, make_ctx
from costmodel.engine.tree import Tree, candidate_table
from costmodel.inputs.record import parse_record

tree_mod = importlib.import_module("costmodel.engine.strategies.tree")   # the module, not its function

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20, strategy="tree", draft_model="none", tree_nodes=4,
            acceptance_rate=0.6)


def _ctx(arrays=None, **kw):
    rec = parse_record(dict(BASE, **kw))
    ex, draft = _execs(rec)
    return make_ctx(rec, ex, arrays), draft


def test_draft_passes_run_the_root_and_every_level_but_the_last():
    # levels 2, 3, 1: passes over 1 (the root), 2 and 3 tokens per sequence
    assert tree_mod.draft_pass_tokens(Tree((0, 0, 1, 1, 2, 4))).tolist() == [1, 2, 3]
    assert tree_mod.draft_pass_tokens(Tree(())).tolist() == []
    # a table of (0,), (0, 0), (0, 1): levels [1, 0], [2, 0], [1, 1] -> passes [1, 0], [1, 0], [1, 1]
    tab = candidate_table(2, (0.8, 0.1))
    assert tree_mod.draft_pass_tokens(tab).tolist() == [[1, 0], [1, 0], [1, 1]]


def test_head_parameters_by_hand():
    ctx, _ = _ctx()
    m = ctx.ex.model
    # one layer (attention 64·128 + 64·64, FFN 3·64·128, two norms 2·64) + the 2d × d fusion
    assert tree_mod.eagle_extra_params(m) == 12_288 + 24_576 + 128 + 2 * 64 * 64
    # per Medusa head a d × d ResBlock and a d × vocab LM head
    assert tree_mod.medusa_params(m, 3) == 3 * (64 * 64 + 64 * 1000)


def test_medusa_and_eagle_operators_by_hand():
    ctx, _ = _ctx()
    (op,) = tree_mod.medusa_ops(ctx.ex, 3, 2.0)
    assert (op.name, op.kind, op.group) == ("medusa_heads", "matrix", "heads")
    params = 3 * (64 * 64 + 64 * 1000)
    # 2 FLOPs per weight per sequence; weights once in fp16, fp32 logits of 3 heads per sequence
    assert float(op.flops) == 2 * params * 2
    assert float(op.hbm_bytes) == params * 2 + 2 * 3 * 1000 * 4
    fuse = tree_mod.eagle_fuse_op(ctx.ex, 4.0)
    assert fuse.name == "eagle_fuse"
    # a 2·64 × 64 FC over 4 tokens: 2·8192·4 FLOPs; weights 8192·2 B, activations 4·(128 + 64)·2 B
    assert float(fuse.flops) == 2 * 8192 * 4
    assert float(fuse.hbm_bytes) == 8192 * 2 + 4 * 192 * 2
    head = tree_mod.eagle_exec(ctx.ex)
    assert head.model.n_layers == 1 and head.model.d_model == 64 and head.pp == 1
    # whole on one pipeline stage even when the target is split over two
    assert tree_mod.eagle_exec(dataclasses.replace(ctx.ex, pp=2)).pp == 1
    # a dense one-layer model sharing the target's embedding and LM head, named as such
    h = head.model
    assert (h.id, h.name, h.n_experts, h.experts_per_token, h.tied_embeddings, h.published_params) == \
        ("eagle-head(unit-model)", "EAGLE head", 1, 1, True, None)
    assert h.source == "EAGLE (arXiv:2401.15077) draft head"


def test_the_alpha_whose_rank_model_gives_a_trees_tau():
    # two children of the root, ranks α and α(1 − α): τ = 1 + 2α − α²; τ = 1.75 at α = 0.5, 1 at α = 0
    got = tree_mod.alpha_for_tree_tau(Tree((0, 0)), np.array([1.75, 1.0]))
    assert got.tolist() == pytest.approx([0.5, 0.0], abs=1e-15)


def test_tau_for_many_alphas_interpolates_on_the_grid():
    t = Tree((0, 0))

    def tau(a):
        return 1 + 2 * a - a * a

    assert tree_mod.tree_tokens_for_alphas(t, [0.5, 0.25, 0.5]).tolist() == [1.75, tau(0.25), 1.75]
    # more distinct α than grid points (513 over [0, 1], step 1/512): linear between grid values;
    # α = 1/1024 sits halfway between the grid's 0 and 1/512
    alphas = np.concatenate([[1 / 1024], np.linspace(0.3, 0.9, 600)])
    got = tree_mod.tree_tokens_for_alphas(t, alphas)
    assert got[0] == pytest.approx((tau(0.0) + tau(1 / 512)) / 2, rel=1e-15)
    assert got[0] != pytest.approx(tau(1 / 1024), rel=1e-9)


def test_depth_bound_of_medusa_is_its_heads():
    rec = parse_record(dict(BASE, draft_model="medusa", medusa_heads=3))
    assert tree_mod.depth_bound(rec) == 3
    assert tree_mod.depth_bound(parse_record(dict(BASE, draft_model="medusa", medusa_heads=3, tree_depth=2))) == 2
    assert tree_mod.depth_bound(parse_record(dict(BASE, draft_model="medusa", medusa_heads=3, tree_depth=5))) == 3
    assert tree_mod.depth_bound(parse_record(dict(BASE, tree_depth=5))) == 5


def test_hardware_search_input_errors():
    ctx, draft = _ctx(tree_shape="optimal_for_hardware")
    with pytest.raises(InputError) as e:
        tree_mod.tree(dataclasses.replace(ctx, rec=dataclasses.replace(ctx.rec, tree_nodes=None)), draft)
    assert str(e.value) == "field 'tree_nodes': optimal_for_hardware needs a node budget"
    assert e.value.field == "tree_nodes"
    ctx, draft = _ctx({"batch_size": np.array([1.0, 2.0])}, tree_shape="optimal_for_hardware")
    with pytest.raises(InputError, match="optimal_for_hardware trees are searched per configuration; sweep them "
                                         "one row at a time") as e:
        tree_mod.tree(ctx, draft)
    assert e.value.field == "tree_shape"
