"""The attention operator of a decoding pass (costmodel.engine.ops), by hand on the unit model: kernels
that do not share a KV head among its query heads, and unfused kernels' score traffic.

unit model: 2 layers, 4 query heads and 2 KV heads of 16 (r = 2 query heads per KV head), fp16: one
token's K and V in one layer 2·2·16·2 = 128 B; q in and o out 2·64·2 = 256 B per token. Unit device:
L2 of 1e7 B. Each figure below is one layer's (``Op.hbm_bytes``, ``Op.l2_bytes``; ``Op.count`` = 2).
"""

import dataclasses
import os

import pytest

from costmodel.engine.evaluate import build_exec
from costmodel.engine.ops import layer_ops
from costmodel.engine.strategies.common import decode_shape
from costmodel.inputs.record import parse_record

D = os.path.join(os.path.dirname(__file__), "data")

# B = 4 sequences × 1 token over L = 40,010 cached tokens: 160,040 KV tokens read, 4 written
B, L = 4.0, 40_010.0
READ = 4 * 40_010
K = READ * 128                          # 20,485,120 B of K and V read per layer
BASE = K + 4 * 128 + 4 * 256            # read + written + q and o


def _attention(**rt_changes):
    ex = build_exec(parse_record(dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml",
                                      runtime=f"{D}/unit-rt.yaml", batch_size=4, prompt_len=40_000, gen_len=20)))
    ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, **rt_changes))
    (op,) = [o for o in layer_ops(decode_shape(B, 1.0, L), ex) if o.name == "attention"]
    return float(op.count), float(op.hbm_bytes), float(op.l2_bytes)


def test_grouped_kernel_reads_each_kv_head_once():
    assert _attention(gqa_attention="grouped") == (2, BASE, 0.0)


def test_per_query_head_kernel_rereads_k_for_the_second_query_head():
    # r − 1 = 1 re-read of K, served by L2 for the share h = L2 / K = 1e7 / 20,485,120 of it
    h = 1e7 / K
    count, hbm, l2 = _attention(gqa_attention="per_query_head")
    assert count == 2
    assert hbm == pytest.approx(BASE + 1 * K * (1 - h), rel=1e-12)
    assert l2 == pytest.approx(1 * K * h, rel=1e-12)


def test_repeat_kv_kernel_writes_r_copies_then_reads_them():
    # r = 2 copies of K written (2K), then read: the share 1e7 / (2K) of them from L2
    h = 1e7 / (2 * K)
    count, hbm, l2 = _attention(gqa_attention="repeat_kv")
    assert hbm == pytest.approx(BASE + 2 * K + 2 * K * (1 - h), rel=1e-12)
    assert l2 == pytest.approx(2 * K * h, rel=1e-12)


def test_unfused_kernel_writes_and_reads_the_fp32_scores():
    # pairs 4·(40,010 + 1) = 160,044 per head; 4 heads · 4 B, written once and read once
    count, hbm, l2 = _attention(gqa_attention="grouped", fused_attention=False)
    assert hbm == BASE + 2 * 4 * 4 * 160_044


# --------------------------------------------------------------------------- MLA
# the unit model with MLA: latent kv_lora 32 + rope 8, no q LoRA, per head nope 16 + rope 8 for q·k and
# v 16; K/V up-projection 32 · 4 heads · (16 + 16) = 4,096 parameters. Per (query, key) pair and head
# the absorbed form costs 2·(2·32 + 8) = 144 FLOPs; the up-projected form 2·(16 + 8 + 16) = 80 FLOPs
# plus 2·4,096 FLOPs per cached token it expands (the context read less the pass's own tokens).
def _mla_ops(tmp_path, shape, q_lora="null", **kw):
    p = tmp_path / f"unit-mla-{q_lora}.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", f"id: unit-mla-{q_lora}")
                 + f"mla:\n  kv_lora_rank: 32\n  q_lora_rank: {q_lora}\n  qk_rope_head_dim: 8\n"
                 + "  qk_nope_head_dim: 16\n  v_head_dim: 16\n")
    ex = build_exec(parse_record(dict(model=str(p), hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
                                      batch_size=2, prompt_len=100, gen_len=20, **kw)))
    return {o.name: o for o in layer_ops(shape, ex)}


def _mla_attention(tmp_path, shape):
    return float(_mla_ops(tmp_path, shape)["attention"].flops)


def test_mla_decode_attends_in_the_absorbed_form(tmp_path):
    # 2 sequences × 1 token over 110: 222 pairs, 220 tokens read; absorbed 4 heads · 144 · 222 = 127,872
    # < up-projected 4 · 80 · 222 + 2·4,096 · (220 − 2) = 1,856,896
    assert _mla_attention(tmp_path, decode_shape(2.0, 1.0, 110.0)) == 4 * 144 * 222 == 127_872


def test_mla_prefill_attends_in_the_up_projected_form(tmp_path):
    # one prompt of 100: 5,050 pairs, the 100 tokens read are the pass's own (nothing to expand):
    # up-projected 4 · 80 · 5,050 = 1,616,000 < absorbed 4 · 144 · 5,050 = 2,908,800
    from costmodel.engine.strategies.common import prefill_shape
    assert _mla_attention(tmp_path, prefill_shape(1.0, 100.0)) == 4 * 80 * 5_050 == 1_616_000


def test_mla_projections_by_hand(tmp_path):
    # q 4 heads · (16 + 8) = 96 wide; latent 32 + 8 = 40. Without a q LoRA the q/k/v GEMM holds
    # d·q = 64·96 = 6,144, the down-projection d·40 = 2,560 and the K/V up-projection 4,096 parameters;
    # it reads d = 64 and writes q + latent = 136 activations per token (fp16). 2 tokens.
    ops = _mla_ops(tmp_path, decode_shape(2.0, 1.0, 110.0))
    p = 6_144 + 2_560 + 4_096
    assert (float(ops["qkv_proj"].flops), float(ops["qkv_proj"].hbm_bytes)) == (2 * p * 2, p * 2 + 2 * (64 + 136) * 2)
    # a q LoRA of 16: d·16 + 16·96 = 2,560 replaces d·q
    ops = _mla_ops(tmp_path, decode_shape(2.0, 1.0, 110.0), q_lora=16)
    assert float(ops["qkv_proj"].flops) == 2 * (2_560 + 2_560 + 4_096) * 2
    # on tp = 2 the heads split: q up 16·48, K/V up 2,048; the down-projections stay whole on each rank;
    # written per token: 48 + 40 = 88
    ops = _mla_ops(tmp_path, decode_shape(2.0, 1.0, 110.0), q_lora=16, n_devices=2)
    p = 64 * 16 + 16 * 48 + 2_560 + 2_048
    assert (float(ops["qkv_proj"].flops), float(ops["qkv_proj"].hbm_bytes)) == (2 * p * 2, p * 2 + 2 * (64 + 88) * 2)
    # the output projection reads heads·v = 4·16/2 = 32 per rank: 32 × 64
    assert float(ops["o_proj"].flops) == 2 * 32 * 64 * 2


def test_dense_layer_vector_work_and_tp_attention_traffic_by_hand():
    # unit model, 2 tokens: two RMSNorms, RoPE and residual adds 12·64 FLOPs a token; SiLU(gate)·up
    # 4·128 FLOPs and 3·128·2 B a token
    ex = build_exec(parse_record(dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml",
                                      runtime=f"{D}/unit-rt.yaml", batch_size=2, prompt_len=100, gen_len=20)))
    ops = {o.name: o for o in layer_ops(decode_shape(2.0, 1.0, 110.0), ex)}
    assert (float(ops["norm_rope_residual"].flops), float(ops["norm_rope_residual"].hbm_bytes)) == \
        (12 * 64 * 2, 6 * 64 * 2 * 2)
    assert (float(ops["ffn_activation"].flops), float(ops["ffn_activation"].hbm_bytes)) == (4 * 128 * 2, 3 * 128 * 2 * 2)
    # tp = 2: each rank keeps 1 KV head (64 B of K and V a token and layer) and 2 query heads (q and o 2·32·2 B)
    ex2 = build_exec(parse_record(dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml",
                                       runtime=f"{D}/unit-rt.yaml", batch_size=2, prompt_len=100, gen_len=20,
                                       n_devices=2)))
    (att,) = [o for o in layer_ops(decode_shape(2.0, 1.0, 110.0), ex2) if o.name == "attention"]
    assert float(att.hbm_bytes) == 220 * 64 + 2 * 64 + 2 * 128


def test_repeat_kv_adds_nothing_to_multi_head_attention():
    # Llama-2-7B has as many KV heads as query heads (r = 1): nothing to repeat
    from costmodel.engine.ops import gqa_extra_bytes
    ex = build_exec(parse_record(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=10,
                                      gen_len=10)))
    ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, gqa_attention="repeat_kv"))
    assert gqa_extra_bytes(ex, 100.0) == (None, None)


def test_kernel_launches_of_a_pass_by_hand():
    # 5 kernels per layer (one of them attention), 3 per pass; 2 layers: 2·(5 − 1 + 1) + 3 = 13;
    # a pass whose attention runs 3 launches per layer: 2·(5 − 1 + 3) + 3 = 17; an extra operator adds its count
    from costmodel.engine.ops import PassShape, gemm, kernel_count
    ex = build_exec(parse_record(dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml",
                                      runtime=f"{D}/unit-rt.yaml", batch_size=2, prompt_len=100, gen_len=20)))
    ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, kernels_per_layer=5.0, kernels_per_pass=3.0))
    assert float(kernel_count(decode_shape(2.0, 1.0, 110.0), ex)) == 13
    three = PassShape(tokens=2.0, pairs=222.0, kv_hbm_tokens=220.0, attn_kernels=3.0)
    assert float(kernel_count(three, ex)) == 17
    extra = [gemm("extra", 64 * 64, 2.0, 64, 64, ex, count=1)]
    assert float(kernel_count(decode_shape(2.0, 1.0, 110.0, extra), ex)) == 14


def test_mla_projections_without_q_lora_under_tp_by_hand(tmp_path):
    # no q LoRA, tp = 2: d·q/2 = 64·48 = 3,072, down-projection 2,560 whole, K/V up 4,096/2 = 2,048
    ops = _mla_ops(tmp_path, decode_shape(2.0, 1.0, 110.0), n_devices=2)
    assert float(ops["qkv_proj"].flops) == 2 * (3_072 + 2_560 + 2_048) * 2
