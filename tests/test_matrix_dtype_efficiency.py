"""fp8 GEMMs are priced at the fp8 GEMM fraction the hardware file measures (``efficiency.matrix_fp8``),
not at the fp16/bf16 one; other dtypes and parts without the entry keep ``efficiency.matrix``."""

from __future__ import annotations

import pytest
import yaml

from costmodel import evaluate, load_hardware
from costmodel.engine.evaluate import build_exec
from costmodel.errors import InputError
from costmodel.inputs.hardware import parse_hardware
from costmodel.inputs.record import parse_record
from costmodel.inputs.specs import zoo_dir


def _ex(**kw):
    base = dict(model="llama-2-7b", hardware="h100-sxm", batch_size=1, prompt_len=2048, gen_len=1,
                runtime="trt-llm")
    return build_exec(parse_record(dict(base, **kw)))


def test_h100_fp8_gemm_rate_uses_the_fp8_measurement():
    # h100-sxm.yaml: fp8 dense peak 1.9789e15, matrix_fp8 0.698 (cuBLASLt 1382 / 1979 TFLOPS);
    # runtimes/trt-llm.yaml compute_efficiency 1.0 -> 1.9789e15 * 0.698 = 1.38127e15 FLOP/s
    ex = _ex(weight_dtype="fp8")
    assert float(ex.matrix_flops_per_s) == pytest.approx(1.9789e15 * 0.698 * ex.rt.compute_efficiency, rel=1e-12)
    assert float(ex.matrix_flops_per_s) / ex.rt.compute_efficiency == pytest.approx(1.381272e15, rel=1e-6)


def test_h100_bf16_gemm_rate_keeps_the_bf16_measurement():
    # bf16 dense 9.894e14 * matrix 0.798 (torch.mm 789.2 / 989.4 TFLOPS) = 7.895412e14 FLOP/s
    ex = _ex(weight_dtype="bf16")
    assert float(ex.matrix_flops_per_s) / ex.rt.compute_efficiency == pytest.approx(7.895412e14, rel=1e-6)


def test_fp8_on_a_part_without_fp8_units_or_entry_uses_the_fp16_fraction():
    # A100: no fp8 units -> weight-only on fp16 units: 3.12e14 * 0.84 = 2.6208e14 FLOP/s
    ex = _ex(weight_dtype="fp8", hardware="a100-80gb")
    assert float(ex.matrix_flops_per_s) / ex.rt.compute_efficiency == pytest.approx(2.6208e14, rel=1e-6)
    # L40S has fp8 units but no fp8 GEMM measurement: its bf16 fraction 0.743 applies to the fp8 peak
    hw = load_hardware("l40s")
    assert hw.matrix_efficiency_for("fp8") == hw.matrix_efficiency == 0.743


def test_fp8_prefill_of_a_long_prompt_is_compute_bound_at_the_fp8_fraction():
    # Llama-2-7B prefill of 2048 tokens on one H100, fp8: the linear layers are 2 * 6.48e9 FLOPs per
    # token (6.48e9 weights in the 32 layers, lm head apart) = 2.654e16 FLOPs; at 1.3813e15 FLOP/s
    # that alone is 19.2 ms; with the bf16 fraction (0.798) it would be 16.8 ms. The ratio of the
    # two TTFTs is therefore at least 0.798 / 0.698 = 1.143 on the compute-bound part.
    rec = dict(model="llama-2-7b", hardware="h100-sxm", batch_size=1, prompt_len=2048, gen_len=1,
               runtime="trt-llm", weight_dtype="fp8")
    import dataclasses
    from costmodel.inputs.runtime import load_runtime
    # without the runtime's fitted per-step host overhead, which would dilute the ratio
    rt = dataclasses.replace(load_runtime("trt-llm"), step_overhead_s=0.0)
    base = parse_record(rec).replace(runtime=rt)
    t = float(evaluate(base)["ttft_s"])
    flat = dataclasses.replace(load_hardware("h100-sxm"), matrix_efficiency_by_dtype=())
    t_flat = float(evaluate(base.replace(hardware=flat))["ttft_s"])
    assert t > 0.0192
    assert 1.10 < t / t_flat <= 0.798 / 0.698 + 1e-9


def test_hardware_loader_checks_matrix_fp8():
    data = yaml.safe_load((zoo_dir("hardware_specs") / "h100-sxm.yaml").read_text())
    del data["efficiency"]["matrix_fp8"]["source"]
    with pytest.raises(InputError) as exc:
        parse_hardware(data, "hw.yaml")
    assert "efficiency.matrix_fp8" in str(exc.value)
