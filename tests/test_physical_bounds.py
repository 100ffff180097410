"""Physical bounds: no fitted or sourced efficiency may make the model beat the datasheet.

A step cannot move its HBM bytes faster than the devices' datasheet bandwidth, nor do its FLOPs
faster than their datasheet matrix peak. Efficiencies (runtime and hardware) are fractions in
(0, 1], overheads are >= 0, in the loaders and in the calibration bounds alike.
"""

from __future__ import annotations

import os

import pytest
import yaml
from hypothesis import example, given, settings

from costmodel import evaluate, load_hardware
from costmodel.calibration import calibrate
from costmodel.errors import InputError
from costmodel.inputs.hardware import parse_hardware
from costmodel.inputs.runtime import parse_runtime
from costmodel.inputs.specs import zoo_dir, zoo_ids
from tests.test_properties import records

#: examples of the floor property: 400 per run in CI (COSTMODEL_FLOOR_EXAMPLES=10000 for the full search)
FLOOR_EXAMPLES = int(os.environ.get("COSTMODEL_FLOOR_EXAMPLES", "400" if os.environ.get("CI") else "150"))


def _runtime_yaml(rid):
    return yaml.safe_load((zoo_dir("runtimes") / f"{rid}.yaml").read_text())


@pytest.mark.parametrize("rid", zoo_ids("runtimes"))
def test_every_runtime_efficiency_is_a_fraction_and_overheads_non_negative(rid):
    rt = parse_runtime(_runtime_yaml(rid), f"{rid}.yaml")
    assert 0 < rt.bandwidth_efficiency <= 1.0
    assert 0 < rt.compute_efficiency <= 1.0
    for k in ("host_per_kernel_s", "step_overhead_s", "spec_step_overhead_s", "memory_overhead_bytes"):
        assert getattr(rt, k) >= 0


@pytest.mark.parametrize("field", ["bandwidth_efficiency", "compute_efficiency"])
def test_runtime_loader_rejects_an_efficiency_above_one(field):
    data = _runtime_yaml("trt-llm")
    data[field] = {"value": 1.15, "source": "test"}
    with pytest.raises(InputError) as exc:
        parse_runtime(data, "rt.yaml")
    assert "rt.yaml" in str(exc.value) and field in str(exc.value)


def test_runtime_loader_rejects_a_negative_overhead():
    data = _runtime_yaml("vllm")
    data["step_overhead_s"] = {"value": -1e-4, "source": "test"}
    with pytest.raises(InputError):
        parse_runtime(data, "rt.yaml")


@pytest.mark.parametrize("key", ["memory_bandwidth", "matrix", "matrix_fp8"])
def test_hardware_loader_rejects_an_efficiency_above_one(key):
    data = yaml.safe_load((zoo_dir("hardware_specs") / "h100-sxm.yaml").read_text())
    data["efficiency"][key]["value"] = 1.08
    with pytest.raises(InputError) as exc:
        parse_hardware(data, "hw.yaml")
    assert "hw.yaml" in str(exc.value)


@pytest.mark.parametrize("hid", zoo_ids("hardware_specs"))
def test_every_hardware_efficiency_is_a_fraction(hid):
    hw = load_hardware(hid)
    assert 0 < hw.memory_efficiency <= 1.0 and 0 < hw.matrix_efficiency <= 1.0
    assert all(0 < v <= 1.0 for _, v in hw.matrix_efficiency_by_dtype)


def test_calibration_bounds_are_physical():
    for name, (lo, hi, _scale) in calibrate.BOUNDS.items():
        assert lo >= 0, name
        if name.endswith("efficiency"):
            assert 0 < lo and hi <= 1.0, name


def test_batch_64_h100_step_no_longer_beats_the_bandwidth_floor():
    """Llama-2-7B fp16 on one H100 SXM, TRT-LLM, batch 64 at prompt 4096: the step reads
    13.48 GB of weights + 64 · (4096 + 64) · 0.5 MiB of KV = 153.2 GB (the engine's figure);
    at the 3.35 TB/s datasheet that is 153.2e9 / 3.35e12 = 45.7 ms, so the step must take at least that
    (it took 43.9 ms with bandwidth_efficiency 1.15)."""
    out = evaluate(dict(model="llama-2-7b-32k", hardware="h100-sxm", runtime="trt-llm", batch_size=64,
                        prompt_len=4096))      # Llama-2-7B dimensions; 4096 + 128 tokens need the 32K variant
    assert out["hbm_bytes_per_step"] == pytest.approx(153.2e9, rel=1e-3)
    assert out["step_latency_s"] >= 153.2e9 / 3.35e12


def _floor_s(rec, out):
    """max(HBM bytes / (devices · datasheet bandwidth), FLOPs / (devices · datasheet matrix peak))."""
    hw = load_hardware(rec["hardware"])
    n = out.get("n_devices_total", out["n_devices"])
    peak = max(v for v in hw.matrix_flops_per_s.values() if v)   # the highest matrix rate of the part
    return max(out["hbm_bytes_per_step"] / (n * hw.bandwidth_bytes_per_s), out["flops_per_step"] / (n * peak))


@settings(max_examples=FLOOR_EXAMPLES)
@given(records())
@example(dict(model="llama-2-7b-32k", hardware="h100-sxm", runtime="trt-llm", batch_size=64, prompt_len=4096))
def test_step_never_beats_the_datasheet_floor(rec):
    out = evaluate(rec)
    assert out["step_latency_s"] >= _floor_s(rec, out) * (1 - 1e-9), (rec, out["step_latency_s"])
