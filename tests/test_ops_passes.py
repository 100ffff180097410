"""Operators of prefill and verification passes (costmodel.engine.ops), by hand on unit models: a pass's
share under attention data parallelism, windowed and all-windowed attention, given KV writes and L2
re-reads, MLA's up-projected form with cached tokens to expand, quantised MoE experts (their
dequantisation and their GEMM roofline), the weights' scales by input width, the MTP projection and
the MoE all-to-all.

Unit model (tests/data/unit-model.yaml): 2 layers, d 64, 4 query heads and 2 KV heads of 16, d_ff 128,
vocabulary 1000, fp16: one token's K and V in one layer 2·2·16·2 = 128 B; q in and o out 2·64·2 = 256 B
per token. Made MoE as in tests/test_ops_moe.py: routed experts of width 32 (3·64·32 = 6,144 parameters
each), top-2, 1 shared expert, the first layer dense. Unit device: fp16 1e14, fp8 2e14 FLOP/s, vector
1e13 FLOP/s, HBM 1e12 B/s, every efficiency 1; scale-up link 1e11 B/s and 10 µs, network 1e10 B/s and
20 µs, 8 devices a node.
"""

import dataclasses
import math
import os

import pytest

from costmodel.engine.evaluate import build_exec
from costmodel.engine.ops import PassShape, layer_ops, moe_alltoall_ops, mtp_projection_op
from costmodel.engine.roofline import op_time
from costmodel.engine.strategies.common import decode_shape
from costmodel.inputs.record import parse_record

D = os.path.join(os.path.dirname(__file__), "data")
EXPERT = 3 * 64 * 32        # 6,144 parameters


def _model(tmp_path, name, experts=4, window=None, every=2):
    """The unit model, MoE with ``experts`` routed experts (top-2, 1 shared, first layer dense) when
    experts > 1, with attention windowed to ``window`` (every ``every``-th layer global) when given."""
    text = open(f"{D}/unit-model.yaml").read().replace("id: unit-model", f"id: {name}")
    if experts > 1:
        text = text.replace("n_experts: 1", f"n_experts: {experts}").replace("experts_per_token: 1",
                                                                             "experts_per_token: 2")
        text += "moe:\n  moe_d_ff: 32\n  n_shared_experts: 1\n  first_dense_layers: 1\n"
    if window is not None:
        text += f"attention:\n  window: {window}\n  global_layer_every: {every}\n"
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return str(p)


def _ex(model, rt=None, **kw):
    rec = dict(model=model, hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml", batch_size=2,
               prompt_len=100, gen_len=20)
    rec.update(kw)
    ex = build_exec(parse_record(rec))
    return ex if rt is None else dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, **rt))


def _ops(shape, ex):
    return {op.name: op for op in layer_ops(shape, ex)}


def _work(op):
    return float(op.count), float(op.flops), float(op.hbm_bytes), float(op.l2_bytes)


# --------------------------------------------------------------------------- attention data parallel
# A verification pass of B = 2 sequences × 4 tokens (8 tokens), 6 of them needing logits, 4 new KV
# entries written, 1,210 (query, key) pairs, 600 KV tokens read from HBM and 200 re-read from L2, over
# 2 sequences, 3 attention launches a layer. The MoE model windowed (W = 64; layer 0 windowed, layer 1
# global) on 2 devices, tp 1, ep 2: attention data parallel dp = 2, each device runs half of every
# batch quantity: 4 tokens, 3 logits, 2 writes, 605 pairs, 300 read, 100 re-read, 1 sequence.
VERIFY = PassShape(tokens=8.0, pairs=1210.0, kv_hbm_tokens=600.0, kv_l2_tokens=200.0, lm_tokens=6.0,
                   attn_kernels=3.0, kv_write_tokens=4.0, seqs=2.0)


def test_verification_pass_under_attention_data_parallel_by_hand(tmp_path):
    ex = _ex(_model(tmp_path, "unit-moe-win", window=64), n_devices=2, tensor_parallel=1, expert_parallel=2)
    assert ex.dp == 2
    ops = _ops(VERIFY, ex)
    # global layer: 4 heads · 4·16 FLOPs a pair over 605 pairs; 300 tokens read (128 B each), 2 written,
    # q and o of 4 tokens (256 B each); 100 tokens re-read from L2
    assert _work(ops["attention"]) == (1, 4 * 4 * 16 * 605, 300 * 128 + 2 * 128 + 4 * 256, 100 * 128)
    # windowed layer: its one sequence keeps at most 1 · 64 KV tokens (read and re-read: min(300, 64),
    # min(100, 64)); each of its 4 queries attends at most 64 positions: min(605, 4 · 64) = 256 pairs
    assert _work(ops["attention_window"]) == (1, 4 * 4 * 16 * 256, 64 * 128 + 2 * 128 + 4 * 256, 64 * 128)
    # logits for 3 tokens: 2 · 1000 · 64 · 3 FLOPs; weights + 3 tokens · 64 in · 2 B + 3 · 1000 fp32 logits
    assert (float(ops["lm_head"].flops), float(ops["lm_head"].hbm_bytes)) == \
        (2 * 1000 * 64 * 3, 64_000 * 2 + 3 * 64 * 2 + 3 * 1000 * 4)
    # the GEMMs run the device's 4 tokens; the routed experts the stage's 8 (k·T/ep = 2·8/2 = 8 pairs
    # on its 2 experts, of which 2·(1 − (1 − 2/4)⁸) are read)
    assert float(ops["o_proj"].flops) == 2 * 64 * 64 * 4
    distinct = 2 * (1 - 0.5 ** 8)
    assert float(ops["moe_ffn"].flops) == 2 * EXPERT * 8
    assert float(ops["moe_ffn"].hbm_bytes) == pytest.approx(distinct * EXPERT * 2 + 8 * 128 * 2, rel=1e-12, abs=0)
    # a pass's extra operators (an MTP projection, a head's GEMMs) run in the device's share too
    extra = mtp_projection_op(ex, 8.0)
    ops = _ops(dataclasses.replace(VERIFY, extra_ops=[extra]), ex)
    assert ops["mtp_projection"] is extra


def test_windowed_pass_without_seqs_is_priced_unwindowed(tmp_path):
    # a shape without seqs: the windowed layer reads and attends like the global one
    ex = _ex(_model(tmp_path, "unit-win", experts=1, window=64))
    shape = PassShape(tokens=8.0, pairs=1210.0, kv_hbm_tokens=600.0, kv_l2_tokens=200.0)
    ops = _ops(shape, ex)
    whole = (1, 4 * 4 * 16 * 1210, 600 * 128 + 8 * 128 + 8 * 256, 200 * 128)
    assert _work(ops["attention"]) == _work(ops["attention_window"]) == whole


def test_all_windowed_model_has_only_windowed_attention(tmp_path):
    # global_layer_every 0: both layers windowed (W = 64) over 2 sequences: 128 KV tokens read of 600,
    # min(1,210, 8 · 64 = 512) pairs; 8 written (the tokens), q and o of 8
    ex = _ex(_model(tmp_path, "unit-allwin", experts=1, window=64, every=0))
    ops = _ops(PassShape(tokens=8.0, pairs=1210.0, kv_hbm_tokens=600.0, seqs=2.0), ex)
    assert "attention" not in ops
    assert _work(ops["attention_window"]) == (2, 4 * 4 * 16 * 512, 128 * 128 + 8 * 128 + 8 * 256, 0.0)


def test_mla_chunk_expands_its_cached_tokens_in_the_up_projected_form(tmp_path):
    # MLA as in tests/test_ops_attention.py: absorbed 144 FLOPs a pair and head; up-projected 80 a pair
    # and head + 2 · 4,096 per cached token expanded. A chunk of 100 tokens after 10 cached: pairs
    # 100·10 + 5,050 = 6,050, 110 read, 10 to expand: up 4·80·6,050 + 2·4,096·10 = 2,017,920
    # < absorbed 4·144·6,050 = 3,484,800
    p = tmp_path / "unit-mla.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", "id: unit-mla")
                 + "mla:\n  kv_lora_rank: 32\n  q_lora_rank: null\n  qk_rope_head_dim: 8\n"
                 + "  qk_nope_head_dim: 16\n  v_head_dim: 16\n")
    ops = _ops(PassShape(tokens=100.0, pairs=6050.0, kv_hbm_tokens=110.0), _ex(str(p)))
    assert float(ops["attention"].flops) == 4 * 80 * 6_050 + 2 * 4_096 * 10 == 2_017_920
    # on tp 2 a device holds 2 heads and half the K/V up-projection (2,048): up 2·80·6,050 + 2·2,048·10 =
    # 1,008,960 < absorbed 2·144·6,050 = 1,742,400
    ops = _ops(PassShape(tokens=100.0, pairs=6050.0, kv_hbm_tokens=110.0), _ex(str(p), n_devices=2))
    assert float(ops["attention"].flops) == 2 * 80 * 6_050 + 2 * 2_048 * 10 == 1_008_960


def test_per_query_head_kernel_adds_its_rereads_to_the_given_l2_rereads_by_hand():
    # a kernel that reads K and V once per query head (r = 2): 600 tokens read, 600 · 128 = 76,800 B,
    # all within L2 (1e7 B): the second query head's re-read comes from L2; with 200 tokens re-read
    # from L2 already the operator's L2 bytes are 200 · 128 + 76,800
    ex = _ex(f"{D}/unit-model.yaml", rt=dict(gqa_attention="per_query_head"))
    ops = _ops(PassShape(tokens=8.0, pairs=1210.0, kv_hbm_tokens=600.0, kv_l2_tokens=200.0), ex)
    assert _work(ops["attention"]) == (2, 4 * 4 * 16 * 1210, 600 * 128 + 8 * 128 + 8 * 256, 200 * 128 + 76_800)


# --------------------------------------------------------------------------- quantised MoE experts
def test_fp8_experts_without_fp8_moe_gemms_run_weight_only_by_hand(tmp_path):
    # an fp8 engine whose runtime has no fp8 MoE GEMMs (fp8_moe_experts false) and spends 2 vector FLOPs
    # per weight dequantising int8-like weights: the routed and shared experts keep their 1-byte weights,
    # are dequantised (2 FLOPs per weight read) and multiply at the fp16 rate 1e14; the router stays fp8
    ex = _ex(_model(tmp_path, "unit-moe"), rt=dict(fp8_moe_experts=False, dequant_flops_per_weight_int8=2.0),
             weight_dtype="fp8")
    ops = _ops(decode_shape(2.0, 1.0, 110.0), ex)
    moe = ops["moe_ffn"]
    # 3 of the 4 experts read (tests/test_ops_moe.py): 3·6,144 weights at 1 B + 2 tokens·128·2 B·k 2
    assert (moe.kind, float(moe.flops), float(moe.hbm_bytes)) == ("matrix", 2 * EXPERT * 2 * 2, 3 * EXPERT + 1_024)
    assert float(moe.dequant_flops) == 3 * EXPERT * 2
    assert moe.unit_flops_per_s == 1e14
    # its time: the GEMM roofline √(c² + m²), c = FLOPs / 1e14 + dequant / 1e13, m = bytes / 1e12
    c = 2 * EXPERT * 2 * 2 / 1e14 + 3 * EXPERT * 2 / 1e13
    m = (3 * EXPERT + 1_024) / 1e12
    assert float(op_time(moe, ex)[0]) == pytest.approx(math.sqrt(c * c + m * m), rel=1e-12, abs=0)
    shared = ops["shared_experts"]
    assert (float(shared.dequant_flops), shared.unit_flops_per_s) == (EXPERT * 2, 1e14)
    # a GEMM: 2·6,144·2 FLOPs at 1e14 + 6,144·2 dequant FLOPs at 1e13; 6,144 B + 2·128·2 B at 1e12
    c, m = 2 * EXPERT * 2 / 1e14 + EXPERT * 2 / 1e13, (EXPERT + 512) / 1e12
    assert float(op_time(shared, ex)[0]) == pytest.approx(math.sqrt(c * c + m * m), rel=1e-12, abs=0)
    assert (float(ops["router"].dequant_flops), ops["router"].unit_flops_per_s) == (0.0, None)


def test_int8_experts_are_dequantised_per_weight_read_by_hand(tmp_path):
    # weight-only int8 (1 B a weight, per-channel scales counted 0), 3 vector FLOPs per weight: tp 1 reads
    # 3 experts; under ep 2 (dp 2) a device reads 2·(1 − (1 − 2/4)²) = 1.5 of its 2
    rt = dict(dequant_flops_per_weight_int8=3.0)
    ops = _ops(decode_shape(2.0, 1.0, 110.0), _ex(_model(tmp_path, "unit-moe"), rt=rt, weight_dtype="int8"))
    assert float(ops["moe_ffn"].dequant_flops) == 3 * EXPERT * 3
    assert float(ops["moe_ffn"].hbm_bytes) == 3 * EXPERT * 1 + 1_024
    assert ops["moe_ffn"].unit_flops_per_s is None        # the pass's own rate
    # fp16 weights: nothing to dequantise
    ops16 = _ops(decode_shape(2.0, 1.0, 110.0), _ex(_model(tmp_path, "unit-moe"), rt=rt))
    assert float(ops16["moe_ffn"].dequant_flops) == float(ops16["shared_experts"].dequant_flops) == 0.0
    ops = _ops(decode_shape(2.0, 1.0, 110.0), _ex(_model(tmp_path, "unit-moe"), rt=rt, weight_dtype="int8",
                                                  n_devices=2, tensor_parallel=1, expert_parallel=2))
    assert float(ops["moe_ffn"].dequant_flops) == 1.5 * EXPERT * 3


def test_per_channel_scales_follow_each_gemms_input_width_by_hand(tmp_path):
    # int8 with one 2-byte scale per output channel: a weight costs 1 + 2/d_in bytes. On tp 2 the output
    # projection reads d_in = 64/2 = 32 inputs: its 32 × 64 = 2,048 weights at 1 + 2/32 B,
    # + 2 tokens · (32 in + 64 out) · 2 B; the q/k/v projection reads d = 64: 64 · (32 + 2·16) = 4,096
    # weights at 1 + 2/64 B + 2 tokens · (64 + 64) · 2 B
    ex = _ex(f"{D}/unit-model.yaml", rt=dict(int8_scale_bytes_per_group=2.0), weight_dtype="int8", n_devices=2)
    ops = _ops(decode_shape(2.0, 1.0, 110.0), ex)
    assert float(ops["o_proj"].hbm_bytes) == 2_048 * (1 + 2 / 32) + 2 * 96 * 2
    assert float(ops["qkv_proj"].hbm_bytes) == 4_096 * (1 + 2 / 64) + 2 * 128 * 2


def test_lm_head_kept_unquantised_is_not_dequantised_by_hand():
    # int8 body with 3 dequant FLOPs a weight, the LM head kept in fp16 (quantize_lm_head false): the
    # q/k/v projection's 8,192 weights cost 8,192·3 vector FLOPs and 1 B each (+ 2 tokens · (64 in + 128
    # out) · 2 B); the LM head's 64,000
    # weights none and 2 B each (+ 2 tokens · 64 in · 2 B + 2 · 1000 fp32 logits)
    ex = _ex(f"{D}/unit-model.yaml", rt=dict(dequant_flops_per_weight_int8=3.0, quantize_lm_head=False),
             weight_dtype="int8")
    ops = _ops(decode_shape(2.0, 1.0, 110.0), ex)
    assert (float(ops["qkv_proj"].dequant_flops), float(ops["qkv_proj"].hbm_bytes)) == (8_192 * 3, 8_192 + 2 * 192 * 2)
    assert float(ops["lm_head"].dequant_flops) == 0.0
    assert float(ops["lm_head"].hbm_bytes) == 64_000 * 2 + 2 * 64 * 2 + 2 * 1000 * 4
    # quantised LM head (the default): dequantised like the body, 1 B a weight
    ex = _ex(f"{D}/unit-model.yaml", rt=dict(dequant_flops_per_weight_int8=3.0), weight_dtype="int8")
    head = _ops(decode_shape(2.0, 1.0, 110.0), ex)["lm_head"]
    assert (float(head.dequant_flops), float(head.hbm_bytes)) == (64_000 * 3, 64_000 + 2 * 64 * 2 + 2 * 1000 * 4)


def test_mtp_projection_reads_2d_inputs_of_the_groups_tokens_by_hand(tmp_path):
    # the 2d → d projection: 2·64·64 = 8,192 weights, each 1 + 2/128 B (int8, a 2-byte scale per row of
    # 2d = 128 inputs); under attention data parallel dp 2 a device projects 6/2 = 3 of the 6 tokens:
    # 2 · 8,192 · 3 FLOPs, + 3 · (128 in + 64 out) · 2 B
    ex = _ex(_model(tmp_path, "unit-moe"), rt=dict(int8_scale_bytes_per_group=2.0), weight_dtype="int8",
             n_devices=2, tensor_parallel=1, expert_parallel=2)
    op = mtp_projection_op(ex, 6.0)
    assert (op.count, op.group) == (1, "pass")
    assert (float(op.flops), float(op.hbm_bytes)) == (2 * 8_192 * 3, 8_192 * (1 + 2 / 128) + 3 * 192 * 2)
    # tp 2 without data parallel: each rank holds half the projection (4,096) and projects all 6 tokens
    op = mtp_projection_op(_ex(f"{D}/unit-model.yaml", n_devices=2), 6.0)
    assert (float(op.flops), float(op.hbm_bytes)) == (2 * 4_096 * 6, 4_096 * 2 + 6 * 192 * 2)


# --------------------------------------------------------------------------- MoE all-to-all
def test_alltoall_sends_the_tp_share_in_fp8_by_hand(tmp_path):
    # fp8 engine on 4 devices, tp 2, ep 4 (dp 2): a device's group runs 4/2 = 2 of the 4 decode tokens and
    # the device sends its 2/tp = 1 token to k = 2 experts, 3/4 of them elsewhere: 1 · 2 · 3/4 · 64
    # values, dispatched in fp8 with a 4-byte scale per 128 values (1 + 4/128 B), combined in fp16 (2 B);
    # over the scale-up link (10 µs + S / 1e11 B/s), once per MoE layer (1)
    ex = _ex(_model(tmp_path, "unit-moe"), weight_dtype="fp8", batch_size=4, n_devices=4, tensor_parallel=2,
             expert_parallel=4)
    disp, comb = moe_alltoall_ops(ex, 2.0)
    s = 1 * 2 * 3 / 4 * 64
    assert (disp.count, comb.count) == (1, 1)
    assert float(disp.comm_s) == pytest.approx(1e-5 + s * (1 + 4 / 128) / 1e11, rel=1e-12, abs=0)
    assert float(comb.comm_s) == pytest.approx(1e-5 + s * 2 / 1e11, rel=1e-12, abs=0)


def test_alltoall_of_a_stage_across_nodes_takes_the_network_by_hand(tmp_path):
    # 12 routed experts on 12 devices, tp 1, ep 6 (dp 6), pp 2: stage 1 holds devices 6..11, across the
    # node boundary at 8, so its all-to-all runs over the network (20 µs + S / 1e10 B/s); fp16 dispatch:
    # 3 tokens sent to k = 2 experts, 5/6 of them elsewhere, 64 values of 2 B
    ex = _ex(_model(tmp_path, "unit-moe12", experts=12), batch_size=6, n_devices=12, tensor_parallel=1,
             expert_parallel=6, pipeline_parallel=2)
    disp, comb = moe_alltoall_ops(ex, 3.0)
    s = 3 * 2 * 5 / 6 * 64 * 2
    assert float(disp.comm_s) == float(comb.comm_s) == pytest.approx(2e-5 + s / 1e10, rel=1e-12, abs=0)


def test_no_alltoall_without_attention_data_parallel(tmp_path):
    # tp 2, ep 2 (dp 1): every device holds every token and the layer's all-reduce combines the experts
    ops = _ops(decode_shape(2.0, 1.0, 110.0), _ex(_model(tmp_path, "unit-moe"), n_devices=2, tensor_parallel=2,
                                                  expert_parallel=2))
    assert "moe_dispatch" not in ops and "moe_combine" not in ops
    assert ops["allreduce"].count == 4


def test_alltoall_dispatches_fp4_engines_in_fp8_by_hand(tmp_path):
    # a device with fp4 matrix units running nvfp4 weights dispatches in fp8 + scales too (1 + 4/128 B)
    hw = tmp_path / "unit-hw-fp4.yaml"
    hw.write_text(open(f"{D}/unit-hw.yaml").read().replace("int4: null}", "int4: null, fp4: 4.0e+14}"))
    ex = _ex(_model(tmp_path, "unit-moe"), weight_dtype="nvfp4", hardware=str(hw), batch_size=4, n_devices=4,
             tensor_parallel=2, expert_parallel=4)
    assert ex.compute_dtype == "fp4"
    disp, comb = moe_alltoall_ops(ex, 2.0)
    s = 1 * 2 * 3 / 4 * 64
    assert float(disp.comm_s) == pytest.approx(1e-5 + s * (1 + 4 / 128) / 1e11, rel=1e-12, abs=0)
    assert float(comb.comm_s) == pytest.approx(1e-5 + s * 2 / 1e11, rel=1e-12, abs=0)
