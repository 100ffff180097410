"""NCCL's ring and tree all-reduces run at the link's measured all-reduce bus bandwidth
(``interconnect.scale_up.collective_bandwidth_bytes_per_s``, nccl-tests busbw at large messages); the
peer-to-peer kernels and point-to-point sends keep the datasheet rate."""

import os
from types import SimpleNamespace

import pytest
import yaml

from costmodel import InputError, load_hardware
from costmodel.calibration import calibrate as c
from costmodel.engine.parallel import allreduce_time_s, transfer_time_s
from costmodel.inputs.hardware import Link
from costmodel.inputs.specs import zoo_dir, zoo_ids

LINK = Link("NVLink, NVSwitch", bandwidth_bytes_per_s=4.0e11, latency_s=2e-6, collective_bandwidth_bytes_per_s=3.2e11)


def test_ring_and_tree_use_the_measured_bus_bandwidth():
    s = 3.2e7                                   # 32 MB
    # ring, n = 8: 14·2e-6 + 1.75·3.2e7/3.2e11 = 2.8e-5 + 1.75e-4 = 2.03e-4 (the datasheet would give 1.68e-4)
    assert allreduce_time_s(s, 8, LINK, "ring") == pytest.approx(2.03e-4)
    # tree, n = 8: 6·2e-6 + 2·3.2e7/3.2e11 = 1.2e-5 + 2.0e-4 = 2.12e-4; auto = the smaller = ring
    assert allreduce_time_s(s, 8, LINK, "tree") == pytest.approx(2.12e-4)
    assert allreduce_time_s(s, 8, LINK, "auto") == pytest.approx(2.03e-4)


def test_peer_to_peer_kernels_and_sends_keep_the_datasheet_rate():
    # vLLM's one-shot (n = 8, 16 KiB, NVSwitch): α + 7·S/β = 2e-6 + 7·16384/4e11 = 2e-6 + 2.8672e-7
    assert allreduce_time_s(16384, 8, LINK, "custom") == pytest.approx(2.28672e-6)
    # a point-to-point send: α + S/β = 2e-6 + 4e6/4e11 = 1.2e-5
    assert transfer_time_s(4e6, LINK) == pytest.approx(1.2e-5)


def test_without_a_measurement_the_datasheet_stands_in():
    bare = Link("x", bandwidth_bytes_per_s=4.0e11, latency_s=2e-6)
    assert bare.collective_beta_bytes_per_s == 4.0e11
    # ring, n = 2: 2·2e-6 + 1·4e6/4e11 = 4e-6 + 1e-5 = 1.4e-5
    assert allreduce_time_s(4e6, 2, bare, "ring") == pytest.approx(1.4e-5)


def test_l40s_tp4_prefill_all_reduce_by_hand():
    # Llama-2-70B prefill of 2048 tokens on 4×L40S: S = 2048·8192·2 B = 33554432 B over PCIe 4.0 x16.
    # NCCL ring at the 22 GB/s bus bandwidth measured on PCIe 4.0 x16 with P2P (not the 31.5 GB/s datasheet):
    # 6·8e-6 + 1.5·33554432/2.2e10 = 4.8e-5 + 2.287802e-3 = 2.335802e-3 s per all-reduce
    # (tree: 4·8e-6 + 2·33554432/2.2e10 = 3.082e-3 s; auto picks the ring)
    link = load_hardware("l40s").scale_up
    assert (link.bandwidth_bytes_per_s, link.collective_beta_bytes_per_s) == (3.1508e10, 2.2e10)
    assert allreduce_time_s(33554432, 4, link, "auto") == pytest.approx(2.335802e-3, rel=1e-6)


#: what a collective bandwidth's source says it is (hardware_specs/README.md, "Links")
SOURCE_KINDS = ("MEASURED", "DERIVED from a per-link measurement, not an all_reduce_perf output", "PROXY",
                "DATASHEET stands in")


def test_every_shipped_part_records_its_collective_bandwidth_with_a_source():
    for hid in zoo_ids("hardware_specs"):
        data = yaml.safe_load(open(os.path.join(zoo_dir("hardware_specs"), f"{hid}.yaml")))
        rec = data["interconnect"]["scale_up"]["collective_bandwidth_bytes_per_s"]
        assert rec["source"].split(":")[0] in SOURCE_KINDS, hid
        up = load_hardware(hid).scale_up
        assert 0 < up.collective_beta_bytes_per_s <= up.bandwidth_bytes_per_s, hid


def _broken(tmp_path, value, **extra):
    data = yaml.safe_load(open(os.path.join(zoo_dir("hardware_specs"), "l40s.yaml")))
    data["interconnect"]["scale_up"]["collective_bandwidth_bytes_per_s"] = dict(dict(value=value, source="s"), **extra)
    p = tmp_path / "broken.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


@pytest.mark.parametrize("value", [3.2e10, 0.0, -1.0])
def test_out_of_range_is_an_input_error(tmp_path, value):
    # above the link's 3.1508e10 B/s datasheet rate, zero or negative: refused, naming file and field
    with pytest.raises(InputError) as e:
        load_hardware(_broken(tmp_path, value))
    assert "broken.yaml" in str(e.value)
    assert "interconnect.scale_up.collective_bandwidth_bytes_per_s.value" in str(e.value)


def test_source_required_and_unknown_keys_refused(tmp_path):
    data = yaml.safe_load(open(os.path.join(zoo_dir("hardware_specs"), "l40s.yaml")))
    data["interconnect"]["scale_up"]["collective_bandwidth_bytes_per_s"] = {"value": 2e10}
    p = tmp_path / "nosource.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="source"):
        load_hardware(str(p))
    with pytest.raises(InputError, match="effciency|allowed|unknown"):
        load_hardware(_broken(tmp_path, 2e10, effciency=0.7))


def test_ablation_switch_restores_the_datasheet_rate():
    rewrite = c.ABLATIONS["all-reduce at the measured bus bandwidth (nccl-tests busbw; off: datasheet link rate)"]()["records"]
    hw = rewrite(SimpleNamespace(hardware="a100-80gb"))["hardware"]
    assert load_hardware("a100-80gb").scale_up.collective_beta_bytes_per_s == 2.316e11
    assert hw.scale_up.collective_beta_bytes_per_s == hw.scale_up.bandwidth_bytes_per_s == 3.0e11
