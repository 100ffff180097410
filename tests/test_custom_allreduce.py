"""vLLM's custom all-reduce (one-shot / two-shot peer-to-peer kernels): ``allreduce_algorithm=custom``,
or a runtime whose ``tp_allreduce`` is ``custom`` (the vllm profile: vLLM's default all-reduce).

Hand computations use the MI300X link: xGMI fully connected mesh, α = 8 µs, β = 448 GB/s
(7 links x 64 GB/s); Llama-3.1-70B: 80 layers, d_model 8192.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import evaluate, load_hardware
from costmodel.engine.evaluate import build_exec
from costmodel.engine.parallel import allreduce_time_s, custom_allreduce_applies
from costmodel.errors import InputError
from costmodel.inputs.hardware import Link
from costmodel.inputs.record import parse_record
from costmodel.inputs.runtime import load_runtime, parse_runtime

MESH = load_hardware("mi300x").scale_up
PCIE = Link("PCIe 4.0 x16", bandwidth_bytes_per_s=2.5e10, latency_s=1e-5)


def test_link_is_the_mi300x_mesh():
    assert (MESH.latency_s, MESH.bandwidth_bytes_per_s) == (8e-6, 4.48e11)
    # RCCL's ring/tree run at 7 links × ~48 GB/s usable = 336 GB/s; the peer-to-peer kernel at the 448 GB/s datasheet
    assert MESH.collective_beta_bytes_per_s == 7 * 48e9
    assert custom_allreduce_applies(8, MESH)


def test_one_shot_below_256_kib_at_8_ranks():
    # 16 KiB (batch 1 x 8192 x 2 B): α + 7·S/β = 8e-6 + 7·16384/448e9 = 8e-6 + 2.56e-7
    assert allreduce_time_s(16384, 8, MESH, "custom") == pytest.approx(8.256e-6)


def test_two_shot_from_256_kib_at_8_ranks_one_shot_up_to_512_kib_at_4():
    s = 400 * 1024                                    # 409600 B
    # n = 8, two-shot: 2α + 2·7/8·S/β = 16e-6 + 1.75·409600/448e9 = 16e-6 + 1.6e-6
    assert allreduce_time_s(s, 8, MESH, "custom") == pytest.approx(1.76e-5)
    # n = 4, still one-shot: α + 3·S/β = 8e-6 + 3·409600/448e9 = 8e-6 + 2.742857e-6
    assert allreduce_time_s(s, 4, MESH, "custom") == pytest.approx(1.0742857e-5)


def test_beyond_the_8_mib_buffer_it_is_nccl():
    s = 16 * 2 ** 20                                  # 16777216 B
    # NCCL (RCCL) at its measured β_c = 336 GB/s, not the 448 GB/s the custom kernel gets:
    # ring: 14·8e-6 + 1.75·S/β_c = 1.12e-4 + 8.73813e-5 = 1.993813e-4;
    # tree: 6·8e-6 + 2·S/β_c = 4.8e-5 + 9.98644e-5 = 1.478644e-4 (the smaller: auto's pick)
    assert allreduce_time_s(s, 8, MESH, "custom") == pytest.approx(1.478644e-4, rel=1e-5)
    assert allreduce_time_s(s, 8, MESH, "custom") == allreduce_time_s(s, 8, MESH, "auto")


def test_pcie_only_two_ranks_not_four():
    # two PCIe GPUs: one-shot, α + S/β = 1e-5 + 16384/2.5e10 = 1e-5 + 6.5536e-7
    assert allreduce_time_s(16384, 2, PCIE, "custom") == pytest.approx(1.065536e-5)
    # four: vLLM disables its kernel; NCCL's tree 2·2·1e-5 + 2·16384/2.5e10 = 4e-5 + 1.31072e-6
    assert not custom_allreduce_applies(4, PCIE)
    assert allreduce_time_s(16384, 4, PCIE, "custom") == pytest.approx(4.131072e-5)
    # nor for a rank count outside 2, 4, 6, 8, nor over a network link
    assert not custom_allreduce_applies(3, MESH)
    assert not custom_allreduce_applies(8, Link("InfiniBand NDR 400 Gb/s", 5e10, 1e-5))


REC = dict(model="llama-3.1-70b", hardware="mi300x", n_devices=8, weight_dtype="fp8", runtime="vllm",
           batch_size=1, prompt_len=128, gen_len=16)


def test_auto_is_the_runtimes_own_all_reduce():
    # the vllm profile runs vLLM's custom kernel; a record that names an algorithm keeps it
    assert load_runtime("vllm").tp_allreduce == "custom"
    assert build_exec(parse_record(REC)).allreduce_algorithm == "custom"
    assert build_exec(parse_record(dict(REC, allreduce_algorithm="tree"))).allreduce_algorithm == "tree"
    # a profile without it (or set to auto) leaves NCCL's choice
    nccl = dataclasses.replace(load_runtime("vllm"), tp_allreduce="auto")
    assert build_exec(parse_record(REC).replace(runtime=nccl)).allreduce_algorithm == "auto"
    assert build_exec(parse_record(dict(REC, runtime="trt-llm"))).allreduce_algorithm == "auto"


def test_decode_step_all_reduces_by_hand():
    # custom (the vllm profile's own, so also auto): 2 per layer x 80 layers x 8.256e-6 s = 1.32096e-3 s
    for alg in ("custom", "auto"):
        out = evaluate(dict(REC, allreduce_algorithm=alg))
        assert out["time_interconnect_s"] == pytest.approx(1.32096e-3)
    # NCCL's tree instead, at RCCL's β_c = 336 GB/s:
    # 160 x (2·3·8e-6 + 2·16384/336e9) = 160 x (4.8e-5 + 9.75238e-8) = 7.695604e-3
    out = evaluate(dict(REC, allreduce_algorithm="tree"))
    assert out["time_interconnect_s"] == pytest.approx(7.695604e-3, rel=1e-6)


def test_unknown_tp_allreduce_is_an_input_error():
    data = {"id": "x", "name": "x", "uses_cuda_graphs": True, "fused_attention": True,
            "tp_allreduce": {"value": "magic", "source": "s"}}
    for k in ("kernels_per_layer", "kernels_per_pass", "host_per_kernel_s", "step_overhead_s",
              "bandwidth_efficiency", "compute_efficiency", "memory_overhead_bytes"):
        data[k] = {"value": 1.0 if "efficiency" in k else 0.0, "source": "s"}
    with pytest.raises(InputError, match="tp_allreduce"):
        parse_runtime(data, "x.yaml")
