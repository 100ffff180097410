"""Expert parallelism: experts split over the devices of a stage, attention tensor- or data-parallel,
and the MoE all-to-all (dispatch and combine) priced on the link. Hand-computed expectations."""

from __future__ import annotations

import pytest

import costmodel
from costmodel import InputError
from costmodel.engine.evaluate import build_exec
from costmodel.engine.memory import weights_device_bytes
from costmodel.inputs.model import load_model
from costmodel.inputs.record import parse_record

# DeepSeek-V3: 61 layers (3 dense, 58 MoE), d 7168, 256 routed experts of moe_d_ff 2048, top-8, 1 shared;
# MLA latent 512 + rope 64 per token and layer. H200: NVLink 450 GB/s, 2.14 µs; IB NDR 50 GB/s, 10 µs.
V3 = dict(model="deepseek-v3", hardware="h200", n_devices=8, batch_size=64, prompt_len=1024, gen_len=128,
          weight_dtype="bf16")
EXPERT = 3 * 7168 * 2048                       # 44,040,192 parameters (gate, up, down)
ROUTED = 58 * 256 * EXPERT                     # 653,908,770,816 routed-expert parameters


def _ops(rec):
    return {o["name"]: o for o in costmodel.evaluate(rec, details=True)["operators"]}


def test_routed_expert_count_by_hand():
    m = load_model("deepseek-v3")
    assert m.n_moe_layers == 58 and m.expert_params == EXPERT == 44_040_192
    assert ROUTED == 653_908_770_816


def test_dp_attention_weights_per_device():
    # tensor_parallel 1: attention, dense layers, shared experts, embeddings and head on every device
    # (n_params − routed) · 2 B, plus 1/8 of the routed experts · 2 B
    ex = build_exec(parse_record(dict(V3, expert_parallel=8, tensor_parallel=1)))
    n = load_model("deepseek-v3").n_params
    assert (ex.tp, ex.dp, ex.ep) == (1, 8, 8)
    assert weights_device_bytes(ex) == pytest.approx((n - ROUTED) * 2.0 + ROUTED * 2.0 / 8, rel=1e-12)


def test_tp_attention_with_ep_holds_what_tp_holds():
    # tensor_parallel 8 with expert_parallel 8 (vLLM --enable-expert-parallel): the routed experts split 8
    # ways by expert instead of 8 ways within each expert: the same bytes per device
    tp = build_exec(parse_record(V3))
    ep = build_exec(parse_record(dict(V3, expert_parallel=8)))
    assert (ep.tp, ep.dp) == (8, 1)
    assert weights_device_bytes(ep) == pytest.approx(weights_device_bytes(tp), rel=1e-12)


def test_kv_per_device_follows_the_attention_layout():
    # bf16 KV: 576 · 2 B · 61 layers = 70,272 B per token; 64 sequences · 1152 tokens = 73,728 tokens
    tp = costmodel.evaluate(dict(V3, expert_parallel=8))
    dp = costmodel.evaluate(dict(V3, expert_parallel=8, tensor_parallel=1))
    assert tp["memory_target_kv_bytes"] == 73_728 * 70_272 == 5_181_014_016     # the latent on every TP rank
    assert dp["memory_target_kv_bytes"] == 73_728 / 8 * 70_272 == 647_626_752  # each group: its 8 sequences
    assert dp["kv_cache_bytes"] == 8 * 647_626_752


def test_alltoall_per_decode_step_by_hand():
    # DP8 attention: each device sends its 64 / 8 = 8 tokens, k = 8 copies each, 7/8 of them off-device.
    # fp8 dispatch (1 B + 4 B per 128 values): S = 8·8·7/8·7168·1.03125 = 413,952 B → 2.14 µs + S/450 GB/s
    # bf16 combine: S = 8·8·7/8·7168·2 = 802,816 B → 2.14 µs + S/450 GB/s; 58 MoE layers each
    ops = _ops(dict(V3, weight_dtype="fp8", expert_parallel=8, tensor_parallel=1))
    dispatch = 2.14e-6 + 413_952 / 4.5e11
    combine = 2.14e-6 + 802_816 / 4.5e11
    assert ops["moe_dispatch"]["time_s"] == pytest.approx(58 * dispatch, rel=1e-12)
    assert ops["moe_combine"]["time_s"] == pytest.approx(58 * combine, rel=1e-12)
    assert 58 * (dispatch + combine) == pytest.approx(405.07e-6, rel=1e-4)
    assert "allreduce" not in ops                  # tensor_parallel 1: nothing to all-reduce


def test_tp_attention_with_ep_combines_by_allreduce():
    # every device holds every token: no all-to-all, the layer's two all-reduces as with TP
    ops = _ops(dict(V3, expert_parallel=8))
    assert "moe_dispatch" not in ops and "moe_combine" not in ops
    assert ops["allreduce"]["time_s"] == _ops(V3)["allreduce"]["time_s"]


def test_alltoall_across_nodes_runs_on_the_network():
    # 16 devices = two HGX nodes: IB at 50 GB/s and 10 µs. 128 sequences over 16 groups = 8 tokens each;
    # bf16 dispatch S = 8·8·15/16·7168·2 = 860,160 B → 10 µs + 17.2032 µs = 27.2032 µs per layer
    ops = _ops(dict(V3, n_devices=16, batch_size=128, expert_parallel=16, tensor_parallel=1))
    assert ops["moe_dispatch"]["time_s"] == pytest.approx(58 * (1e-5 + 860_160 / 5e10), rel=1e-12)


def test_routed_expert_flops_are_the_same_split_by_expert_or_within_experts():
    # all devices together: 2 · P_e · k · T · 58 = 2 · 44,040,192 · 8 · 64 · 58 FLOPs per decode step
    want = 2.0 * EXPERT * 8 * 64 * 58
    for rec in (V3, dict(V3, expert_parallel=8), dict(V3, expert_parallel=8, tensor_parallel=1)):
        assert _ops(rec)["moe_ffn"]["flops"] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("rec,field,words", [
    (dict(V3, model="llama-3.1-8b"), "expert_parallel", "dense"),
    (dict(V3, n_devices=16), "expert_parallel", "pipeline stage"),
    (dict(V3, tensor_parallel=3), "tensor_parallel", "divide"),
    (dict(V3, model="mixtral-8x7b", n_devices=16, expert_parallel=16, tensor_parallel=1), "expert_parallel",
     "8 routed experts"),
])
def test_impossible_layouts_are_input_errors(rec, field, words):
    rec = dict(rec)
    rec.setdefault("expert_parallel", 8)
    with pytest.raises(InputError) as exc:
        costmodel.evaluate(rec)
    assert f"field '{field}'" in str(exc.value) and words in str(exc.value)


def test_pipeline_stages_with_ep():
    # Qwen3-235B-A22B (94 layers, 128 experts) on 16 devices in 2 stages: each stage's 8 devices hold
    # 1/8 of its 47 layers' experts; each device half of what one stage of EP8 alone would hold
    rec = dict(V3, model="qwen3-235b-a22b", n_devices=16, pipeline_parallel=2, expert_parallel=8, tensor_parallel=1)
    ex = build_exec(parse_record(rec))
    one = build_exec(parse_record(dict(rec, n_devices=8, pipeline_parallel=1)))
    assert (ex.tp, ex.dp, ex.ep, ex.pp) == (1, 8, 8, 2)
    assert weights_device_bytes(ex) == pytest.approx(weights_device_bytes(one) / 2, rel=1e-12)
