"""Per-branch tree verification by hand on the unit device: re-reads of the context from L2 when the L2
term binds, one attention launch per branch, Medusa heads inside a per-branch verification; and an EAGLE
head built from an MoE target.

unit-model: 2 layers, d 64, 4 heads, 2 KV heads of 16 (128 B of KV per token and layer), d_ff 128, vocab 1000.
"""

import dataclasses
import os

import pytest

from costmodel import evaluate
from handcalc import UNIT, gemm_s, pass_s

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20, strategy="tree", tree_parents="0,0,1",
            rank_acceptance="0.6,0.2", attention_kernel="per_branch", draft_model="none")
# tree (0, 0, 1): branches root-0-... of 2 and 3 tokens: 5 tokens per sequence, 3 + 6 = 9 pairs inside the
# branches, 2 branches; L = 110: one layer's context KV 2·110·128 B fits L2 (h = 1): the context is read
# once from HBM (220 tokens) and once more from L2 (220)
VERIFY = pass_s(UNIT, 10, 2 * 9 + 2 * 110 * 5, 220, kv_l2=220, writes=10)


def test_per_branch_rereads_from_l2_bind_by_hand():
    # 64 one-node branches (tree_width 64, depth 1): 2 tokens and 1 + 2 = 3 pairs each, 128 tokens and 192
    # pairs per sequence. B·L = 2·40,000 (P = 39,999, G = 2): one layer's context 80,000·128 B = 1.024e7 B,
    # h = 1e7 / 1.024e7 = 0.9765625; 63 re-reads of each context: 5,040,000 tokens, 4,921,875 from L2 and
    # 118,125 from HBM. The L2 term binds: (HBM + L2 bytes)/1e13 ≈ 6.5e-5 s against ≈ 2.5e-5 s of HBM
    kw = dict(BASE, tree_parents=None, tree_width=64, tree_depth=1, prompt_len=39_999, gen_len=2,
              rank_acceptance="0.5")
    kv_hbm, kv_l2 = 80_000 + 118_125, 4_921_875
    r = evaluate(kw)
    expected = pass_s(UNIT, 256, 2 * 192 + 80_000 * 128, kv_hbm, kv_l2=kv_l2, writes=256)
    assert r["step_latency_s"] == pytest.approx(expected, rel=1e-12)
    hbm_b = (kv_hbm + 256) * 128 + 256 * 256
    assert (hbm_b + kv_l2 * 128) / 1e13 > max(hbm_b / 1e12, 4 * 64 * (2 * 192 + 80_000 * 128) / 1e14)


def _launch_runtime(tmp_path):
    """The unit runtime with 1 ms of host work per kernel launch, 10 kernels per layer (attention one of
    them) and 5 per pass: every pass on the unit device is host-bound (its device time is microseconds)."""
    rt = open(f"{D}/unit-rt.yaml").read()
    rt = (rt.replace("kernels_per_layer: {value: 0", "kernels_per_layer: {value: 10")
            .replace("kernels_per_pass: {value: 0", "kernels_per_pass: {value: 5")
            .replace("host_per_kernel_s: {value: 0.0", "host_per_kernel_s: {value: 1.0e-03"))
    p = tmp_path / "launch.yaml"
    p.write_text(rt)
    return str(p)


def test_per_branch_launches_attention_once_per_branch(tmp_path):
    # 2 branches: 2 layers · (10 − 1 + 2) + 5 = 27 launches, 27 ms; prefix_aware launches it once: 25
    rt = _launch_runtime(tmp_path)
    assert evaluate(dict(BASE, runtime=rt))["step_latency_s"] == pytest.approx(27e-3, rel=1e-12)
    assert evaluate(dict(BASE, runtime=rt, attention_kernel="prefix_aware"))["step_latency_s"] == \
        pytest.approx(25e-3, rel=1e-12)
    # Medusa heads add their one kernel: 28
    assert evaluate(dict(BASE, runtime=rt, draft_model="medusa", medusa_heads=3))["step_latency_s"] == \
        pytest.approx(28e-3, rel=1e-12)


def test_medusa_heads_run_inside_a_per_branch_verification_by_hand():
    # 3 heads of 64·64 + 64·1000 parameters on the 2 sequences' last hidden states: 2 FLOPs per weight per
    # sequence, the weights once and 3 heads' fp32 logits per sequence
    params = 3 * (64 * 64 + 64 * 1000)
    heads = gemm_s(2 * params * 2, params * 2 + 2 * 3 * 1000 * 4)
    assert evaluate(BASE)["step_latency_s"] == pytest.approx(VERIFY, rel=1e-12)
    r = evaluate(dict(BASE, draft_model="medusa", medusa_heads=3))
    assert r["step_latency_s"] == pytest.approx(VERIFY + heads, rel=1e-12)


def test_an_eagle_head_of_an_moe_target_is_one_dense_layer(tmp_path):
    # the unit model made MoE (4 routed experts of width 32, top-2, 1 shared, no dense layer): the EAGLE
    # head is one dense layer of the target's d_ff 128: q/k/v 64·128 + o 64·64 = 12,288, FFN 3·64·128 =
    # 24,576, 2 norms of 64 and the 2·64 × 64 fusion FC 8,192: 45,184 parameters at 2 B (with the
    # target's 4 experts it would hold 5 experts of 3·64·32 and a 64 × 4 router instead of the FFN; one routed expert's 3·64·32 would undercount it)
    p = tmp_path / "unit-moe.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", "id: unit-moe")
                 .replace("n_experts: 1", "n_experts: 4").replace("experts_per_token: 1", "experts_per_token: 2")
                 + "moe:\n  moe_d_ff: 32\n  n_shared_experts: 1\n  first_dense_layers: 0\n")
    r = evaluate(dict(BASE, model=str(p), draft_model="eagle", attention_kernel="prefix_aware"))
    assert r["memory_draft_weights_bytes"] == 45_184 * 2
    # its two draft passes (2 and 4 tokens over L + depth) run the dense layer's FFN (the unit head's
    # pass_s), and the fusion FC
    one = dataclasses.replace(UNIT, layers=1)
    head = pass_s(one, 2, 2 * 110, 220) + pass_s(one, 4, 4 * 111, 220) + \
        gemm_s(2 * 8192 * 2, 8192 * 2 + 2 * 192 * 2) + gemm_s(2 * 8192 * 4, 8192 * 2 + 4 * 192 * 2)
    assert r["draft_time_per_step_s"] == pytest.approx(head, rel=1e-12)
