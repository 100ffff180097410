"""The MoE operators of one decoding pass (costmodel.engine.ops), worked out by hand on small unit models.

tests/data/unit-model.yaml (d 64, 4 heads of 16, 2 KV heads, d_ff 128, gated, fp16) made MoE: 4 routed
experts of width 32, top-2, 1 shared expert. One expert (gate, up, down) has 3·64·32 = 6,144 parameters.
A pass of B = 2 sequences × 1 token: T = 2 tokens. Each operator is read per device and per layer
(``Op.flops``, ``Op.hbm_bytes``; ``Op.count`` layers).
"""

import os

import pytest

from costmodel.engine.evaluate import build_exec
from costmodel.engine.ops import layer_ops
from costmodel.engine.strategies.common import decode_shape
from costmodel.inputs.record import parse_record

D = os.path.join(os.path.dirname(__file__), "data")
EXPERT = 3 * 64 * 32        # 6,144 parameters


def _ex(tmp_path, first_dense, **kw):
    p = tmp_path / f"unit-moe-{first_dense}.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", f"id: unit-moe-{first_dense}")
                 .replace("n_experts: 1", "n_experts: 4").replace("experts_per_token: 1", "experts_per_token: 2")
                 + f"moe:\n  moe_d_ff: 32\n  n_shared_experts: 1\n  first_dense_layers: {first_dense}\n")
    rec = dict(model=str(p), hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml", batch_size=2,
               prompt_len=100, gen_len=20, **kw)
    return build_exec(parse_record(rec))


def _ops(ex):
    return {op.name: op for op in layer_ops(decode_shape(2.0, 1.0, 110.0), ex)}


def _work(op):
    return float(op.count), float(op.flops), float(op.hbm_bytes)


def test_dense_and_moe_layers_on_one_device_by_hand(tmp_path):
    # 1 dense layer + 1 MoE layer, tp = ep = 1
    ops = _ops(_ex(tmp_path, 1))
    # dense FFN 3·64·128 = 24,576 parameters: 2·24,576·2 FLOPs; weights once + 2 tokens · (64 in + 64 out) · 2 B
    assert _work(ops["ffn"]) == (1, 2 * 24_576 * 2, 24_576 * 2 + 2 * 128 * 2)
    # routed experts: 2 tokens pick 2 of 4 experts each; experts read = 4·(1 − (1 − 2/4)²) = 3 (uniform
    # routing); FLOPs 2·6,144·k·T = 2·6,144·2·2; activations T·(d in + d out)·2 B·k
    assert 4 * (1 - (1 - 2 / 4) ** 2) == 3
    assert _work(ops["moe_ffn"]) == (1, 2 * EXPERT * 2 * 2, 3 * EXPERT * 2 + 2 * 128 * 2 * 2)
    # the shared expert runs every token: 2·6,144·2 FLOPs, its weights + 2 · 128 · 2 B
    assert _work(ops["shared_experts"]) == (1, 2 * EXPERT * 2, EXPERT * 2 + 2 * 128 * 2)
    # router 64 × 4: 2·256·2 FLOPs, 256 · 2 B + 2 tokens · (64 + 4) · 2 B
    assert _work(ops["router"]) == (1, 2 * 256 * 2, 256 * 2 + 2 * 68 * 2)
    # SiLU(gate)·up of the dense layer: 4·128 FLOPs and 3·128·2 B per token
    assert _work(ops["ffn_activation"]) == (1, 4 * 128 * 2, 3 * 128 * 2 * 2)
    # the MoE layer's: each token runs k = 2 routed experts and 1 shared one, each 32 wide: (2 + 1)·32 = 96
    # per token, 4·96 FLOPs and 3·96·2 B per token over T = 2 tokens
    assert _work(ops["moe_activation"]) == (1, 4 * 96 * 2, 3 * 96 * 2 * 2)


def test_expert_parallel_with_attention_data_parallel_by_hand(tmp_path):
    # 2 devices, tp 1, ep 2 (dp 2): each device runs 1 of the 2 sequences (T = 1 token) through its
    # attention and dense layers, and receives the stage's k·T/ep = 2·2/2 = 2 token-expert pairs on its
    # 4/2 = 2 experts, of which 2·(1 − (1 − 2/4)²) = 1.5 are read
    ops = _ops(_ex(tmp_path, 1, n_devices=2, tensor_parallel=1, expert_parallel=2))
    assert _work(ops["moe_ffn"]) == (1, 2 * EXPERT * 2, 1.5 * EXPERT * 2 + 2 * 128 * 2)
    assert _work(ops["ffn"]) == (1, 2 * 24_576 * 1, 24_576 * 2 + 1 * 128 * 2)
    assert _work(ops["shared_experts"]) == (1, 2 * EXPERT * 1, EXPERT * 2 + 1 * 128 * 2)
    assert _work(ops["ffn_activation"]) == (1, 4 * 128 * 1, 3 * 128 * 2 * 1)
    # the MoE layer's activation on this device: 2 routed pairs × 32 + its own token's shared expert × 32
    # = 96 wide in all = the stage's T = 2 tokens × (2 + 1)·32/ep 2 = 48 each
    assert _work(ops["moe_activation"]) == (1, 4 * 48 * 2, 3 * 48 * 2 * 2)
    # attention on the device's own sequence: 1 token over 110, 111 pairs; 4 heads · 4·16 FLOPs a pair;
    # 110 KV tokens read, 1 written (128 B each), q and o 256 B; no L2 re-reads; logits for 1 token
    assert _work(ops["attention"]) == (2, 4 * 4 * 16 * 111, 110 * 128 + 1 * 128 + 1 * 256)
    assert float(ops["attention"].l2_bytes) == 0.0
    assert float(ops["lm_head"].flops) == 2 * 1000 * 64 * 1
    # the MoE layer's dispatch and combine run over the link (an all-to-all each way), moving no HBM bytes
    assert ops["moe_dispatch"].count == ops["moe_combine"].count == 1
    assert float(ops["moe_dispatch"].hbm_bytes) == float(ops["moe_combine"].hbm_bytes) == 0.0
    assert float(ops["moe_dispatch"].comm_s) > 0.0 and float(ops["moe_combine"].comm_s) > 0.0


def test_all_moe_layers_under_expert_parallel_by_hand(tmp_path):
    # both layers MoE, ep 2 (dp 2): no dense FFN; the routed experts as above in each of the 2 layers
    ops = _ops(_ex(tmp_path, 0, n_devices=2, tensor_parallel=1, expert_parallel=2))
    assert "ffn" not in ops and "moe_activation" not in ops
    assert _work(ops["moe_ffn"]) == (2, 2 * EXPERT * 2, 1.5 * EXPERT * 2 + 2 * 128 * 2)
    # activation in both layers: the stage's 2 tokens × (2 + 1)·32/ep 2 = 48 wide each
    assert _work(ops["ffn_activation"]) == (2, 4 * 48 * 2, 3 * 48 * 2 * 2)


def test_tensor_parallel_moe_splits_each_expert_by_hand(tmp_path):
    # tp 2, ep 1: every device holds half of each expert (3,072 parameters) and sees all T = 2 tokens
    ops = _ops(_ex(tmp_path, 1, n_devices=2))
    assert _work(ops["moe_ffn"]) == (1, 2 * (EXPERT / 2) * 2 * 2, 3 * (EXPERT / 2) * 2 + 2 * 128 * 2 * 2)
    assert _work(ops["shared_experts"]) == (1, 2 * (EXPERT / 2) * 2, EXPERT / 2 * 2 + 2 * 128 * 2)
    assert _work(ops["ffn_activation"]) == (1, 4 * 64 * 2, 3 * 64 * 2 * 2)
    # MoE activation: (2 routed + 1 shared)·32 / tp 2 = 48 per token, T = 2
    assert _work(ops["moe_activation"]) == (1, 4 * 48 * 2, 3 * 48 * 2 * 2)
    assert float(ops["router"].flops) == pytest.approx(2 * 256 * 2)
    # o_proj: 64/2 × 64 per rank, activations in (32) and out (64) at 2 B per token
    assert _work(ops["o_proj"]) == (2, 2 * 2048 * 2, 2048 * 2 + 2 * (32 + 64) * 2)
    # two all-reduces per layer (after attention and after the FFN), moving no HBM bytes
    assert ops["allreduce"].count == 4 and float(ops["allreduce"].hbm_bytes) == 0.0


def test_attention_data_parallel_layers_all_reduce_only_their_dense_ffn(tmp_path):
    # tp 2, ep 4 (dp 2) on 4 devices: attention's all-reduce in both layers, the dense layer's FFN
    # all-reduce; the MoE layer combines by all-to-all: 2 + 1 = 3
    ops = _ops(_ex(tmp_path, 1, n_devices=4, tensor_parallel=2, expert_parallel=4))
    assert ops["allreduce"].count == 3
    assert "moe_dispatch" in ops
