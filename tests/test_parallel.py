"""Tensor / pipeline parallelism, multi-node links, draft placement and capacity planning.

Hand computations use the zoo's a100-80gb links: scale_up α = 3.14 µs, β = 300 GB/s; network
α = 10 µs, β = 25 GB/s; 8 devices per node. Llama-2-70B: 80 layers, d_model 8192, 64 heads, 8 KV heads.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import costmodel
from costmodel import evaluate, load_hardware
from costmodel.cli.main import main
from costmodel.engine import memory
from costmodel.engine.evaluate import build_exec
from costmodel.inputs.hardware import Link
from costmodel.engine.parallel import (allreduce_time_s, divisors, draft_link, pipeline_bubble_fraction,
                                pipeline_handoff_s, pipeline_step_latency_s, pp_boundary_links, tp_link,
                                transfer_time_s)
from costmodel.analysis.plan import plan
from costmodel.analysis.plan_prices import load_prices
from costmodel.inputs.record import parse_record
from costmodel.inputs.specs import zoo_ids

A100 = load_hardware("a100-80gb")
NV, NET = A100.scale_up, A100.network
L70 = dict(model="llama-2-70b", hardware="a100-80gb", weight_dtype="bf16", runtime="compiled",
           batch_size=1, prompt_len=5, gen_len=200)


def ring(n, s, link):
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * s / link.bandwidth_bytes_per_s


def op_time(out, name):
    return sum(o["time_s"] for o in out["operators"] if o["name"] == name)


# ----------------------------------------------------------------------------- tensor parallel

def test_allreduce_formulas_by_hand():
    link = Link("x", bandwidth_bytes_per_s=2e11, latency_s=2e-6)
    # ring, n = 8, S = 4 MB: 2·7·2e-6 + 2·7/8 · 4e6/2e11 = 2.8e-5 + 3.5e-5
    assert allreduce_time_s(4e6, 8, link) == pytest.approx(6.3e-5)
    # tree, n = 8: 2·3·2e-6 + 2·4e6/2e11 = 1.2e-5 + 4e-5
    assert allreduce_time_s(4e6, 8, link, "tree") == pytest.approx(5.2e-5)
    assert np.all(allreduce_time_s(np.array([1.0, 2.0]), 1, link) == 0)
    # auto = the faster per message: at 4 MB the tree (5.2e-5 < 6.3e-5); at 64 MB the ring:
    # ring 2.8e-5 + 1.75·6.4e7/2e11 = 5.88e-4, tree 1.2e-5 + 2·6.4e7/2e11 = 6.52e-4
    assert allreduce_time_s(4e6, 8, link, "auto") == pytest.approx(5.2e-5)
    assert allreduce_time_s(6.4e7, 8, link, "auto") == pytest.approx(5.88e-4)
    both = allreduce_time_s(np.array([4e6, 6.4e7]), 8, link, "auto")
    assert both == pytest.approx([5.2e-5, 5.88e-4])
    assert transfer_time_s(1e6, link) == pytest.approx(2e-6 + 5e-6)


def test_tp8_decode_allreduces_match_hand_computation():
    out = evaluate(dict(L70, n_devices=8, allreduce_algorithm="ring"), details=True)
    # batch 1, q = 1: S = 8192·2 B; 2 all-reduces × 80 layers over NVLink, NCCL's ring at the
    # measured 8×A100 all-reduce busbw 231.6 GB/s (not the 300 GB/s datasheet):
    # 14 · 3.14 µs + 1.75 · 16384 B / 2.316e11 B/s = 43.96 µs + 0.1238 µs = 44.084 µs
    per = 14 * 3.14e-6 + 2 * 7 / 8 * 16384 / 2.316e11
    assert per == pytest.approx(4.40838e-5, rel=1e-5)
    assert op_time(out, "allreduce") == pytest.approx(160 * per, rel=1e-9)
    assert out["time_interconnect_s"] == pytest.approx(160 * per, rel=1e-9)
    tree = evaluate(dict(L70, n_devices=8, allreduce_algorithm="tree"))
    per_tree = 6 * 3.14e-6 + 2 * 16384 / 2.316e11        # 1.884e-5 + 1.415e-7 = 1.898e-5 < 4.408e-5
    assert tree["time_interconnect_s"] == pytest.approx(160 * per_tree, rel=1e-9)
    assert tree["step_latency_s"] < out["step_latency_s"]
    # the default is auto (NCCL's per-message choice): a 16 KB message is latency-bound, so the tree
    default = evaluate(dict(L70, n_devices=8))
    assert default["time_interconnect_s"] == pytest.approx(160 * per_tree, rel=1e-9)


def test_default_allreduce_is_auto_and_switches_to_ring_for_large_messages():
    # prefill-size messages: batch 64 x 2048 tokens x 8192 x 2 B = 2.1 GB per all-reduce; the ring moves
    # 2·7/8·S, the tree 2·S, so the bandwidth term decides for the ring (latency terms are µs)
    kw = dict(L70, n_devices=8, batch_size=64, prompt_len=2048)
    S = 64 * 2048 * 8192 * 2
    assert ring(8, S, NV) < 6 * NV.latency_s + 2 * S / NV.bandwidth_bytes_per_s
    assert evaluate(kw)["ttft_s"] == pytest.approx(evaluate(dict(kw, allreduce_algorithm="ring"))["ttft_s"],
                                                   rel=1e-9)
    assert evaluate(kw)["ttft_s"] < evaluate(dict(kw, allreduce_algorithm="tree"))["ttft_s"]


def test_tp_never_raises_per_device_weights():
    for mid in zoo_ids("model_specs"):
        base = parse_record(dict(model=mid, hardware="h100-sxm", batch_size=1, prompt_len=8))
        m = build_exec(base).model
        prev = None
        for tp in divisors(m.n_heads):
            w = memory.weights_device_bytes(build_exec(base.replace(n_devices=tp)))
            assert prev is None or w <= prev, (mid, tp)
            prev = w
    # through evaluate, past the 8 KV heads (K/V projections replicated at TP16 and TP32)
    ws = [evaluate(dict(L70, n_devices=n))["memory_target_weights_bytes"] for n in (1, 2, 4, 8, 16, 32)]
    assert all(b <= a for a, b in zip(ws, ws[1:]))
    assert ws[3] == pytest.approx(ws[0] / 8)


def test_tp_group_spanning_nodes_pays_the_network():
    assert tp_link(A100, 8) is NV and tp_link(A100, 16) is NET
    # a group that straddles a node boundary (TP5 × PP2: devices 5..9) also pays the network
    assert tp_link(A100, 5, 2) is NET and tp_link(A100, 4, 2) is NV
    out = evaluate(dict(L70, n_devices=16, allreduce_algorithm="ring"))
    assert out["time_interconnect_s"] == pytest.approx(160 * ring(16, 16384, NET), rel=1e-9)
    assert out["bound"] == "interconnect"


def test_tree_verification_across_nodes_pays_allreduces_on_every_tree_token():
    kw = dict(L70, n_devices=16, strategy="tree", draft_model="none", tree_width=2, tree_depth=3,
              acceptance_rate=0.6, allreduce_algorithm="ring")
    out = evaluate(kw)
    q = 2 + 4 + 8 + 1                         # 14 nodes + the root
    assert out["time_interconnect_s"] == pytest.approx(160 * ring(16, q * 16384, NET), rel=1e-9)
    ar = evaluate(dict(L70, n_devices=16))
    assert out["time_interconnect_s"] > ar["time_interconnect_s"]


# ----------------------------------------------------------------------------- pipeline parallel

def test_pipeline_handoff_by_hand():
    one = evaluate(dict(L70, n_devices=1), details=True)
    pp2 = evaluate(dict(L70, n_devices=2, pipeline_parallel=2), details=True)
    # one boundary of 8192·2 B plus 4 B of token ids back, both over NVLink
    hand = (3.14e-6 + 16384 / 3.0e11) + (3.14e-6 + 4 / 3.0e11)
    assert op_time(pp2, "pp_handoff") == pytest.approx(hand, rel=1e-12)
    # m = 1: one micro-batch crosses every stage in turn: the full model's pass plus the hand-offs
    assert pp2["step_latency_s"] == pytest.approx(one["step_latency_s"] + hand, rel=1e-12)
    assert pp2["memory_target_weights_bytes"] == pytest.approx(one["memory_target_weights_bytes"] / 2)
    # TP8 × PP2 on two 8-GPU nodes: the boundary and the return both cross nodes
    links = pp_boundary_links(A100, 8, 2)
    assert links == [NET]
    h = pipeline_handoff_s(4.0, 4.0, 8192, 2.0, A100, 8, 2)
    assert h == pytest.approx((1e-5 + 4 * 16384 / 2.5e10) + (1e-5 + 16 / 2.5e10))
    # TP2 × PP4 fits in one node: three NVLink boundaries
    assert pp_boundary_links(A100, 2, 4) == [NV, NV, NV]


def test_pipeline_schedule_formulas():
    T, H = 2e-3, 1e-4
    assert pipeline_step_latency_s(T, 4, 1, H) == pytest.approx(4 * T + H)
    assert pipeline_step_latency_s(T, 4, 4, 0.0) == pytest.approx(4 * T)
    assert pipeline_step_latency_s(T, 4, 8, H) == pytest.approx(8 * T)
    assert pipeline_bubble_fraction(T, 4, 1) == pytest.approx(3 / 4)
    assert pipeline_bubble_fraction(T, 4, 4) == pytest.approx(0.0)
    assert 0 < pipeline_bubble_fraction(T, 4, 4, H) < 0.05


# ----------------------------------------------------------------------------- draft placement

SPEC = dict(L70, n_devices=8, prompt_len=512, strategy="speculative", draft_model="tinyllama-1.1b", gamma=4,
            acceptance_rate=0.7)


def test_draft_links():
    assert draft_link(A100, 8, "same_device") is None
    assert draft_link(A100, 4, "separate_device") is NV
    assert draft_link(A100, 8, "separate_device") is NET     # the node is full: the draft is on another
    assert draft_link(A100, 2, "separate_node") is NET


def test_draft_on_separate_node_pays_token_transfers_and_frees_target_memory():
    same = evaluate(SPEC)
    node = evaluate(dict(SPEC, draft_placement="separate_node"))
    # γ = 4 ids out, γ + 1 back, 4 B each, over the network
    x = (1e-5 + 16 / 2.5e10) + (1e-5 + 20 / 2.5e10)
    assert node["time_interconnect_s"] - same["time_interconnect_s"] == pytest.approx(x, rel=1e-9)
    assert node["step_latency_s"] == pytest.approx(same["step_latency_s"] + x, rel=1e-9)
    assert "memory_draft_weights_bytes" not in node and same["memory_draft_weights_bytes"] > 2e9
    assert node["peak_device_memory_bytes"] < same["peak_device_memory_bytes"]
    assert node["n_devices_total"] == 9
    # a draft that is the target itself, or no model at all, has nothing to move
    for dm in ("self", "none"):
        a = evaluate(dict(SPEC, draft_model=dm))
        b = evaluate(dict(SPEC, draft_model=dm, draft_placement="separate_node"))
        assert b["step_latency_s"] == pytest.approx(a["step_latency_s"])
        assert b["peak_device_memory_bytes"] == pytest.approx(a["peak_device_memory_bytes"])


def test_overlap_look_ahead_at_batch_one():
    serial = evaluate(dict(SPEC, draft_placement="separate_node"))
    over = evaluate(dict(SPEC, draft_placement="separate_node", draft_schedule="overlap"))
    d, v = serial["draft_time_per_step_s"], serial["verify_time_s"]
    x = (1e-5 + 16 / 2.5e10) + (1e-5 + 20 / 2.5e10)
    overhead = serial["step_latency_s"] - (d + v + x)
    p = 0.7 ** 4                                  # all γ drafts accepted: the look-ahead is usable
    assert over["step_latency_s"] == pytest.approx(p * max(d, v) + (1 - p) * (d + v) + x + overhead, rel=1e-9)
    assert over["step_latency_s"] < serial["step_latency_s"]


def test_overlap_never_slower_than_serial_and_uses_half_batches_when_compute_bound():
    kw = dict(model="llama-2-7b", hardware="h100-sxm", runtime="compiled", prompt_len=128, gen_len=64,
              strategy="speculative", draft_model="tinyllama-1.1b", acceptance_rate=0.8, gamma=4,
              draft_placement="separate_device")
    for b in (1, 4, 64, 256):
        s = evaluate(dict(kw, batch_size=b))
        o = evaluate(dict(kw, batch_size=b, draft_schedule="overlap"))
        assert o["step_latency_s"] <= s["step_latency_s"] * (1 + 1e-12)
    # batch 256: the look-ahead is useless (p = 0.8^1024) but two half-batches in flight still gain
    s = evaluate(dict(kw, batch_size=256))
    o = evaluate(dict(kw, batch_size=256, draft_schedule="overlap"))
    assert o["step_latency_s"] < 0.95 * s["step_latency_s"]


# ----------------------------------------------------------------------------- capacity planning

Q70 = dict(model="llama-2-70b", hardware="h100-sxm", weight_dtype="bf16", batch_size=16, prompt_len=3968,
           gen_len=128, runtime="compiled", target_time_per_output_token_s=0.030)


def test_plan_h100_for_llama70b_at_30ms():
    out = plan(dict(Q70))
    # gpt-fast prefills one 3,968-token prompt per pass, so 2 H100s hold the weights, the KV and one
    # prompt's activations but are too slow: bandwidth binds
    assert out["feasible"] and out["binding_constraint"] == "bandwidth"
    n = out["n_devices"]
    assert n == 4
    # the answer is exactly what evaluate says for that configuration
    rec = {k: v for k, v in Q70.items() if not k.startswith("target_")}
    ev = evaluate(dict(rec, n_devices=n, tensor_parallel=out["tensor_parallel"],
                       pipeline_parallel=out["pipeline_parallel"]))
    assert ev["time_per_output_token_s"] == pytest.approx(out["time_per_output_token_s"])
    assert ev["fits"] and ev["time_per_output_token_s"] <= 0.030
    # nothing smaller is feasible, and the next smaller count fails on memory
    smaller = [c for c in out["candidates"] if c["n_devices"] < n]
    assert smaller and not any(c["feasible"] for c in smaller)
    assert all(c["why_not"] == "bandwidth" for c in smaller if c["n_devices"] == max(s["n_devices"]
                                                                                     for s in smaller))


def test_plan_largest_batch_is_feasible_and_the_next_is_not():
    rec = dict(model="llama-2-7b", hardware="a100-80gb", prompt_len=1024, gen_len=128, n_devices=1,
               runtime="compiled")
    out = plan(dict(rec, target_time_per_output_token_s=0.020))
    b = out["batch_size"]
    assert out["binding_constraint"] in ("target", "memory_capacity")
    here, nxt = evaluate(dict(rec, batch_size=b)), evaluate(dict(rec, batch_size=b + 1))
    assert here["fits"] and here["time_per_output_token_s"] <= 0.020
    assert not (nxt["fits"] and nxt["time_per_output_token_s"] <= 0.020)
    # without a target the batch is limited by memory alone
    only_fit = plan(dict(rec))
    assert only_fit["binding_constraint"] == "memory_capacity" and only_fit["batch_size"] >= b
    assert not evaluate(dict(rec, batch_size=only_fit["batch_size"] + 1))["fits"]


def test_plan_throughput_target_and_unreachable_target():
    rec = dict(model="llama-2-7b", hardware="a100-80gb", prompt_len=512, gen_len=128, batch_size=32,
               runtime="compiled")
    out = plan(dict(rec, target_tokens_per_s=1000))
    assert out["feasible"] and out["tokens_per_s"] >= 1000
    hopeless = plan(dict(rec, target_time_per_output_token_s=1e-4), max_devices=8)
    assert not hopeless["feasible"]
    assert hopeless["binding_constraint"] in ("bandwidth", "compute", "interconnect", "launch_overhead")


def test_plan_cheapest_hardware_with_prices(tmp_path):
    p = tmp_path / "prices.yaml"
    p.write_text("currency: USD\nsource: test\nprices:\n  a100-80gb: 1.0\n  h100-sxm: {per_device_hour: 100.0}\n")
    assert load_prices(p)["prices"] == {"a100-80gb": 1.0, "h100-sxm": 100.0}
    rec = {k: v for k, v in Q70.items() if k != "hardware"}
    out = plan(dict(rec, hardware="a100-80gb,h100-sxm"), prices=str(p), parallelism="tp")
    assert out["hardware"] == "a100-80gb" and out["objective"] == "cost_per_hour"
    assert [o["hardware"] for o in out["options"]] == ["a100-80gb", "h100-sxm"]
    assert out["cost_per_hour"] == pytest.approx(out["n_devices"] * 1.0)
    assert all(c["pipeline_parallel"] == 1 for c in out["candidates"])


def test_plan_is_exported_and_callable():
    import sys
    import costmodel.analysis.plan        # importing the submodule must not shadow the function
    assert callable(costmodel.plan) and sys.modules["costmodel.analysis.plan"].plan is costmodel.plan is plan


def test_cli_plan_json_and_errors(tmp_path, capsys):
    words = [f"{k}={v}" for k, v in Q70.items()]
    assert main(["plan", *words, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("n_devices", "batch_size", "time_per_output_token_s", "tokens_per_s", "binding_constraint"):
        assert key in out
    assert main(["plan", *words]) == 0 and "binding_constraint" in capsys.readouterr().out
    assert main(["plan", *words[:-1], "target_time_per_output_tokn_s=0.03"]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert main(["plan", *words[:-1], "target_tokens_per_s=fast"]) == 2
    bad = tmp_path / "p.yaml"
    bad.write_text("prices:\n  h100-sxm: cheap\n")
    assert main(["plan", *words, "--prices", str(bad)]) == 2
    assert "prices.h100-sxm" in capsys.readouterr().err


def test_hardware_link_fields_unchanged_by_replace():
    # guard for the helpers above: a hardware copy with 4 devices per node moves TP8 onto the network
    small = dataclasses.replace(A100, devices_per_node=4)
    assert tp_link(small, 8) is small.network and tp_link(small, 4) is small.scale_up


# ----------------------------------------------------------------------------- device layout, by hand
# A100 nodes hold 8 devices; a target's devices are numbered stage-major (stage s: s·tp … s·tp + tp − 1).

def test_tp_group_link_crosses_a_node_only_where_a_stage_does():
    assert tp_link(A100, 1, 4) is NV
    assert tp_link(A100, 3, 2) is NV            # stages 0–2 and 3–5
    assert tp_link(A100, 3, 3) is NET           # stage 2 is devices 6, 7, 8: device 8 is on node 1
    assert tp_link(A100, 2, 8) is NV            # every pair (2s, 2s + 1) sits in one node
    assert tp_link(A100, 16) is NET             # the default pp = 1: one group of 16 spans two nodes
    assert tp_link(A100, 8) is NV


def test_pipeline_boundaries_and_return_link_by_hand():
    # tp = 3, pp = 3: boundary 1 pairs (0,3), (1,4), (2,5) inside node 0; boundary 2 pairs (3,6), (4,7),
    # (5,8): device 8 is on node 1. The ids go back from the last stage (6, 7, 8) to (0, 1, 2): network
    assert pp_boundary_links(A100, 3, 3) == [NV, NET]
    from costmodel.engine.parallel import pp_return_link
    assert pp_return_link(A100, 3, 3) is NET
    assert pp_return_link(A100, 2, 4) is NV     # devices 6, 7 back to 0, 1
    # tp = 2, pp = 8: boundary 5 (stage 4 → 5) pairs (8, 10), (9, 11), both on node 1
    links = pp_boundary_links(A100, 2, 8)
    assert links == [NV, NV, NV, NET, NV, NV, NV]


def test_pipeline_schedule_defaults_to_one_micro_batch():
    # m = 1 and no hand-off by default: T_step = pp · T_stage, bubble (pp − 1)/pp
    assert pipeline_step_latency_s(0.01, 4) == pytest.approx(0.04)
    assert pipeline_bubble_fraction(0.01, 4) == pytest.approx(0.75)


def test_divisors_by_hand():
    assert divisors(16) == [1, 2, 4, 8, 16]
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert divisors(1) == [1]
    assert all(type(d) is int for d in divisors(12))


def test_kv_transfer_between_instances_by_hand():
    from costmodel.engine.parallel import kv_transfer_link, kv_transfer_s
    # prefill and decode instances of 2 devices each fit one node (4 ≤ 8): scale-up, and each device
    # sends its half of the 1 GB cache: 3.14 µs + 0.5e9 / 300e9
    assert kv_transfer_link(A100, 2) is NV
    assert kv_transfer_s(1e9, A100, 2) == pytest.approx(NV.latency_s + 0.5e9 / NV.bandwidth_bytes_per_s, rel=1e-12)
    # instances of tp 4 × pp 2 = 8 devices: 16 devices do not fit a node; 1/8 of the cache each
    assert kv_transfer_link(A100, 8) is NET
    assert kv_transfer_s(1e9, A100, 4, 2) == pytest.approx(NET.latency_s + 1.25e8 / NET.bandwidth_bytes_per_s,
                                                          rel=1e-12)


def test_active_weights_per_device_by_hand():
    # tests/data/unit-model: per layer 64·(64 + 2·32) + 64·64 attention + 3·64·128 FFN = 36,864
    # weights a token multiplies through, 2 layers, plus the 1000·64 LM head: 137,728 · 2 B (fp16);
    # tp = 2 halves them
    import os
    d = os.path.join(os.path.dirname(__file__), "data")
    kw = dict(model=f"{d}/unit-model.yaml", hardware=f"{d}/unit-hw.yaml", runtime=f"{d}/unit-rt.yaml",
              batch_size=1, prompt_len=10)
    assert memory.active_weights_bytes_device(build_exec(parse_record(kw))) == 137_728 * 2
    assert memory.active_weights_bytes_device(build_exec(parse_record(dict(kw, n_devices=2)))) == 137_728
