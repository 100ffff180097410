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
