"""Tree steps by hand on the unit device: an EAGLE head drafting level by level, Medusa heads inside the
verification, a draft model on its own device, τ given under lock-step, and how the tree and its rank
vector are chosen from the record.

unit-model: 2 layers, d 64, 4 heads, 2 KV heads of 16, d_ff 128 (gated), vocab 1000 (256 B of KV per token).
The EAGLE head is one such layer (128 B of KV per token) with the target's LM head.
"""

import dataclasses
import importlib
import os

import numpy as np
import pytest

from costmodel import evaluate
from costmodel.engine import acceptance
from costmodel.engine.evaluate import _execs, evaluate_passes, make_ctx
from costmodel.inputs.record import parse_record
from handcalc import UNIT, gemm_s, pass_s

tree_mod = importlib.import_module("costmodel.engine.strategies.tree")   # the module, not its function

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20, strategy="tree", tree_parents="0,0,1",
            rank_acceptance="0.6,0.2", attention_kernel="prefix_aware")
HEAD = dataclasses.replace(UNIT, layers=1)
# tree (0, 0, 1): q = 4 tokens per sequence with the root, ancestor pairs 4 + (1 + 1 + 2) = 8
VERIFY = pass_s(UNIT, 8, 2 * (4 * 110 + 8), 220)


def _ctx(arrays=None, **kw):
    rec = parse_record({k: v for k, v in dict(BASE, **kw).items() if v is not None})
    ex, draft = _execs(rec)
    return make_ctx(rec, ex, arrays), draft


def test_an_eagle_head_drafts_the_root_then_level_one_by_hand():
    # two passes: B·1 = 2 tokens at depth 0 and B·2 = 4 tokens at depth 1, each token over L + depth
    # positions, the context's KV (2·110 tokens) read once per pass, plus the 2·64 × 64 fusion FC
    def head_pass(t, depth):
        return pass_s(HEAD, t, t * (110 + depth), 220) + gemm_s(2 * 8192 * t, 8192 * 2 + t * 192 * 2)

    r = evaluate(dict(BASE, draft_model="eagle"))
    assert r["draft_time_per_step_s"] == pytest.approx(head_pass(2, 0) + head_pass(4, 1), rel=1e-12)
    assert r["verify_time_s"] == pytest.approx(VERIFY, rel=1e-12)
    # its weights (45,184 parameters, fp16) and its layer's KV for B·L_peak = 2·120 tokens
    assert r["memory_draft_weights_bytes"] == 45_184 * 2
    assert r["memory_draft_kv_bytes"] == 2 * 120 * 128
    assert r["tree_depth"] == 2
    # the head keeps no prompt of its own: TTFT is the target's prefill of 2 × 100 tokens
    assert r["ttft_s"] == pytest.approx(pass_s(UNIT, 200, 10_100, 200, lm=2), rel=1e-12)
    # the largest activations: that prefill, 200 · 704 · 2 B + 2 logit rows · 1000 · 4 B
    assert r["memory_activations_bytes"] == 200 * 704 * 2 + 2 * 1000 * 4
    p = evaluate_passes(dict(BASE, draft_model="eagle"))
    assert [k for k in p if k != "ar_decode"] == ["prefill", "draft", "verify"]
    assert float(p["prefill"].cost.time_s) == pytest.approx(pass_s(UNIT, 200, 10_100, 200, lm=2), rel=1e-12)
    # the head's attention: 4·4·16 = 256 FLOPs per pair, pairs 2·110 + 4·111
    att = sum(float(row[1]) for row in p["draft"].cost.ops if row[0] == "attention")
    assert att == 256 * (2 * 110 + 4 * 111)
    assert p["draft"].ex.model.id == "eagle-head(unit-model)" and p["prefill"].ex.model.id == "unit-model"


def test_an_eagle3_tree_fuses_features_on_the_root_pass_only():
    # passes over 2 and 4 tokens: the embedding half of q/k/v (64 × 128) on both, the 3d × d fc on the first
    rows = evaluate_passes(dict(BASE, draft_model="eagle3", draft_vocab_size=500))["draft"].cost.ops
    flops = {name: sum(float(r[1]) for r in rows if r[0] == name) for name in ("eagle3_embed_qkv", "eagle3_fc")}
    assert flops == {"eagle3_embed_qkv": 2 * 64 * 128 * (2 + 4), "eagle3_fc": 2 * 192 * 64 * 2}
    # its LM head covers the 500-token draft vocabulary: 2·64·500 FLOPs per token, 6 tokens
    assert sum(float(r[1]) for r in rows if r[0] == "lm_head") == 2 * 64 * 500 * 6
    # the head with a 500-token LM head: 89,600 parameters (see test_spec_passes_and_memory.py)
    assert evaluate(dict(BASE, draft_model="eagle3", draft_vocab_size=500))["memory_draft_weights_bytes"] == 89_600 * 2


def test_medusa_heads_run_inside_the_verification_by_hand():
    # 3 heads of 64·64 + 64·1000 parameters on the 2 sequences' last hidden states: 2 FLOPs per weight
    # per sequence, the weights once and 3 heads' fp32 logits per sequence
    params = 3 * (64 * 64 + 64 * 1000)
    heads = gemm_s(2 * params * 2, params * 2 + 2 * 3 * 1000 * 4)
    r = evaluate(dict(BASE, draft_model="medusa", medusa_heads=3))
    assert r["step_latency_s"] == pytest.approx(VERIFY + heads, rel=1e-12)
    assert r["draft_time_per_step_s"] == 0.0
    assert r["memory_draft_weights_bytes"] == params * 2
    assert [k for k in evaluate_passes(dict(BASE, draft_model="medusa", medusa_heads=3)) if k != "ar_decode"] == \
        ["prefill", "verify"]


def test_a_draft_model_on_its_own_device_holds_its_widest_pass():
    # passes over 1 and 2 tokens per sequence: the widest is B·2 = 4 tokens of the unit draft,
    # 4 · ((2·32 + 64 + 32 + 3·64) · 2 B + 1000 · 4 B)
    ctx, draft = _ctx(draft_model=f"{D}/unit-draft.yaml", draft_placement="separate_device")
    out = tree_mod.tree(ctx, draft)
    assert float(out.memory.other_device["activations"]) == 4 * (352 * 2 + 4000)
    # the tree's 4 verified slots per sequence: 2·4 tokens · 256 B
    assert float(out.memory.device["tree_scratch"]) == 2 * 4 * 256
    assert list(out.passes) == ["prefill", "draft_prefill", "draft", "verify"]
    assert float(out.n_seqs) == 2.0


def test_lockstep_spreads_a_given_tau_over_the_trees_depths():
    # tree (0, 0): τ = 1 + 2α − α² = 1.75 at α = 0.5, ranks 0.5 and 0.25: P(length >= 1) = 0.75;
    # a lock-step batch of 2: 1 + 0.75² = 1.5625
    kw = dict(tree_parents="0,0", rank_acceptance=None, mean_accepted_tokens=1.75, draft_model="none")
    assert evaluate(dict(BASE, **kw, batch_sync="lockstep"))["tokens_per_step"] == pytest.approx(1.5625, rel=1e-12)
    assert evaluate(dict(BASE, **kw))["tokens_per_step"] == 1.75
    ctx, _ = _ctx({"mean_accepted_tokens": np.array([1.75, 1.0])}, **kw, batch_sync="lockstep")
    got = tree_mod.tree_tokens_per_step(ctx, tree_mod.build_tree(ctx))
    assert got.tolist() == pytest.approx([1.5625, 1.0], rel=1e-12)


def test_the_rank_vector_from_tau_alone_uses_the_chain_of_the_trees_depth():
    # τ = 1.9375 = 1 + 0.5 + 0.25 + 0.125 + 0.0625: α = 0.5 for a chain of depth 4 (the default)
    kw = dict(tree_parents=None, tree_nodes=4, rank_acceptance=None, mean_accepted_tokens=1.9375, draft_model="none")
    ctx, _ = _ctx(**kw)
    assert tree_mod.rank_vector(ctx) == pytest.approx(acceptance.default_rank_acceptance(0.5), rel=1e-9)
    # with tree_depth 2: τ = 1.75 gives α = 0.5; a τ beyond depth + 1 is capped there (α = 1)
    ctx, _ = _ctx(**dict(kw, mean_accepted_tokens=1.75, tree_depth=2))
    assert tree_mod.rank_vector(ctx, 2) == pytest.approx(acceptance.default_rank_acceptance(0.5), rel=1e-9)
    assert tree_mod.rank_vector(ctx, 1) == pytest.approx(acceptance.default_rank_acceptance(0.75), rel=1e-9)


def test_which_tree_the_record_asks_for():
    kw = dict(tree_parents=None, rank_acceptance="0.6,0.2", draft_model="none")
    ctx, _ = _ctx(**kw, tree_width=2, tree_depth=2)
    assert tree_mod.build_tree(ctx).parents == (0, 0, 1, 1, 2, 2)              # full 2-ary tree of depth 2
    # with a node budget the depth only bounds the optimal tree: 3 nodes in one level
    ctx, _ = _ctx(**kw, tree_depth=1, tree_nodes=3)
    assert tree_mod.build_tree(ctx).parents == (0, 0, 0)
    # without a depth the optimal 3-node tree for (0.6, 0.2): 1 + 0.6 + 0.36 + 0.216 = 2.176 as a chain
    # beats 1 + 0.6 + 0.2 + 0.36 = 2.16
    ctx, _ = _ctx(**kw, tree_nodes=3)
    assert tree_mod.build_tree(ctx).parents == (0, 1, 2)


def test_a_self_draft_with_a_kv_budget_reads_only_the_budget():
    # MagicDec-style: the target drafts for itself over its last 50 tokens of KV: passes of 2 and 4 tokens
    # over 50 + depth positions, 2·50 KV tokens read each; no draft prefill (the target's own)
    r = evaluate(dict(BASE, draft_model="self", draft_kv_budget=50))
    draft = pass_s(UNIT, 2, 2 * 50, 100) + pass_s(UNIT, 4, 4 * 51, 100)
    assert r["draft_time_per_step_s"] == pytest.approx(draft, rel=1e-12)
    assert [k for k in evaluate_passes(dict(BASE, draft_model="self", draft_kv_budget=50)) if k != "ar_decode"] == \
        ["prefill", "draft", "verify"]


def test_per_branch_verification_rereads_the_context_partly_from_l2():
    # tree (0, 0, 1): branches 0-2 (2 tokens) and 0-1-3 (3 tokens): 5 tokens per sequence, pairs inside
    # the branches 3 + 6 = 9, each branch over the whole context L = 50,010 (P = 50,000, G = 20).
    # One layer's context KV for B = 2: 100,020 · 128 B = 12,802,560 B > L2 (1e7): a share
    # 1e7 / 12,802,560 of the second branch's re-read hits L2, the rest goes to HBM
    L = 50_010
    hit = 1e7 / (2 * L * 128)
    r = evaluate(dict(BASE, prompt_len=50_000, attention_kernel="per_branch", draft_model="none"))
    expected = pass_s(UNIT, 10, 2 * 9 + 2 * L * 5, 2 * L + 2 * L * (1 - hit), kv_l2=2 * L * hit, writes=10)
    assert r["step_latency_s"] == pytest.approx(expected, rel=1e-12)


def test_heads_split_over_tensor_parallel_devices():
    # tp = 2: each device runs half of every GEMM
    ctx, _ = _ctx(n_devices=2, draft_model="medusa", medusa_heads=3)
    params = 3 * (64 * 64 + 64 * 1000)
    (op,) = tree_mod.medusa_ops(ctx.ex, 3, 2.0)
    assert float(op.flops) == 2 * params / 2 * 2
    assert float(op.hbm_bytes) == params / 2 * 2 + 2 * 3 * 1000 / 2 * 4
    fuse = tree_mod.eagle_fuse_op(ctx.ex, 4.0)
    assert float(fuse.flops) == 2 * 8192 / 2 * 4
    assert float(fuse.hbm_bytes) == 8192 / 2 * 2 + 4 * (128 + 32) * 2
    r = evaluate(dict(BASE, n_devices=2, draft_model="medusa", medusa_heads=3))
    ar = evaluate(dict(BASE, n_devices=2, strategy="autoregressive", tree_parents=None, rank_acceptance=None,
                       attention_kernel=None))
    assert r["memory_draft_weights_bytes"] == params * 2 / 2
    assert r["weights_bytes"] - ar["weights_bytes"] == params * 2


def test_host_work_of_a_tree_step_per_method_and_per_sequence():
    # the runtime's EAGLE path syncs once with the host (launch 0 + host-link latency 10 µs) and spends
    # 1 µs per sequence (B = 2)
    ctx, draft = _ctx(draft_model="eagle")
    plain = tree_mod.tree(ctx, draft).step.time_s
    rt = dataclasses.replace(ctx.ex.rt, spec_step_syncs=(("eagle", 1.0),), host_per_seq_s=1e-6)
    ctx2 = dataclasses.replace(ctx, ex=dataclasses.replace(ctx.ex, rt=rt))
    assert tree_mod.tree(ctx2, draft).step.time_s == pytest.approx(plain + 1e-5 + 2e-6, rel=1e-12)


def test_windowed_layers_cap_a_trees_target_kv(tmp_path):
    # every layer with a 16-token window: B·L_peak = 240 tokens capped at B·16 = 32, 256 B each
    p = tmp_path / "unit-model-w16.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", "id: unit-model-w16")
                 + "\nattention: {window: 16}\n")
    assert evaluate(dict(BASE, model=str(p), draft_model="none"))["memory_target_kv_bytes"] == 32 * 256


def test_the_hardware_search_prices_the_chosen_tree_as_given():
    # searching with a draft model under a depth bound: the tree it picks, priced on its own, gives the
    # same step (draft passes included) and stays within the bound
    kw = dict(BASE, tree_parents=None, draft_model=f"{D}/unit-draft.yaml", tree_nodes=6, tree_depth=2,
              tree_shape="optimal_for_hardware")
    r = evaluate(kw)
    assert r["tree_depth"] <= 2 and r["draft_time_per_step_s"] > 0
    alone = dict(kw, tree_shape=None, tree_nodes=None, tree_depth=None,
                 tree_parents=",".join(str(p) for p in r["tree_parents"]))
    assert evaluate(alone)["step_latency_s"] == r["step_latency_s"]
