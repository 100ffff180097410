"""Links and collectives at their boundaries, by hand on the unit device (scale-up 1e11 B/s and 10 µs,
network 1e10 B/s and 20 µs, 8 devices per node)."""

import dataclasses
import os
import re

import pytest

from costmodel.engine.evaluate import _execs
from costmodel.engine.parallel import allreduce_time_s, alltoall_time_s, kv_transfer_link, tp_link
from costmodel.inputs.record import parse_record

D = os.path.join(os.path.dirname(__file__), "data")


def _hw():
    rec = parse_record(dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
                            batch_size=1, prompt_len=10, gen_len=10))
    return _execs(rec)[0].hw


def test_an_all_to_all_over_two_devices_sends_half_the_copies():
    # 10 tokens · k = 2 copies · (2 − 1)/2 leave · 64 · 2 B = 1,280 B, one latency
    hw = _hw()
    assert float(alltoall_time_s(10.0, 2, 2, 64, 2.0, hw.scale_up)) == pytest.approx(1e-5 + 1280 / 1e11, rel=1e-12)
    assert float(alltoall_time_s(10.0, 2, 1, 64, 2.0, hw.scale_up)) == 0.0


def test_an_unknown_all_reduce_algorithm_is_named_with_the_allowed_ones():
    with pytest.raises(ValueError, match=re.escape("unknown all-reduce algorithm 'mesh'; allowed: auto, ring, tree")):
        allreduce_time_s(1e6, 2, _hw().scale_up, "mesh")


def test_a_prefill_and_a_decode_instance_share_a_node_while_both_fit():
    hw = _hw()
    assert kv_transfer_link(hw, 4) is hw.scale_up          # 2 · 4 = 8 devices: one node
    assert kv_transfer_link(hw, 5) is hw.network           # 10 devices: two nodes


def test_a_tp_pair_straddling_two_nodes_uses_the_network():
    # 3 devices per node: stage 1 of tp = 2, pp = 2 is devices 2 and 3, on nodes 0 and 1
    hw = dataclasses.replace(_hw(), devices_per_node=3)
    assert tp_link(hw, 2, 2) is hw.network
    assert tp_link(hw, 2, 1) is hw.scale_up                # devices 0 and 1


def test_one_device_per_node_puts_every_device_on_its_own_node():
    # devices_per_node = 1: device i is on node i, so any TP pair crosses nodes
    from costmodel.engine.parallel import node_of
    assert [node_of(i, 1) for i in range(4)] == [0, 1, 2, 3]
    hw = dataclasses.replace(_hw(), devices_per_node=1)
    assert tp_link(hw, 2, 1) is hw.network                 # devices 0 and 1: nodes 0 and 1
    assert tp_link(hw, 1, 1) is hw.scale_up                # no all-reduce partner


def test_a_separate_node_draft_of_stacked_hardware_talks_over_each_devices_network():
    # two members, the second's network 4e10 B/s and 30 µs: a draft on another node uses each
    # member's network even though one target device leaves room in the node (1 < 8)
    from costmodel.engine.parallel import draft_link
    from costmodel.inputs.hardware import stack_hardware
    a = _hw()
    b = dataclasses.replace(a, network=dataclasses.replace(a.network, bandwidth_bytes_per_s=4e10, latency_s=3e-5))
    stack = stack_hardware([a, b], (2,))
    link = draft_link(stack, 1, "separate_node")
    assert link.bandwidth_bytes_per_s.tolist() == [1e10, 4e10]
    assert link.latency_s.tolist() == [2e-5, 3e-5]
    # separate_device with one target device: each member's scale-up fabric (1e11 B/s, 10 µs)
    near = draft_link(stack, 1, "separate_device")
    assert near.bandwidth_bytes_per_s.tolist() == [1e11, 1e11]
    assert draft_link(stack, 1, "same_device") is None


def test_tp_link_over_an_array_of_tp_keeps_the_pipeline_stages():
    # 8 devices per node, pp = 2: tp = 2 puts stage 1 on devices 2..3 (node 0): scale-up; tp = 6 puts
    # stage 1 on devices 6..11, nodes 0 and 1: network (with pp = 1, devices 0..5 stay in node 0)
    hw = _hw()
    link = tp_link(hw, [2, 6], 2)
    assert link.bandwidth_bytes_per_s.tolist() == [1e11, 1e10]
    assert link.latency_s.tolist() == [1e-5, 2e-5]
    assert tp_link(hw, [2, 6], 1).bandwidth_bytes_per_s.tolist() == [1e11, 1e11]
