"""Per-step host work that grows with an instance's worker ranks (``step_overhead_per_rank_s``).

An engine with one worker process per device (vLLM's multiprocess executor above one GPU) hands each
step's schedule to every rank and waits for the last, so every step waits

    step_host_s(ranks) = step_overhead_s + step_overhead_per_rank_s · (ranks − 1),   ranks = tp · pp

Expected values below are that formula with round numbers, on the unit device and model (whose own
step times do not depend on the runtime's host figures): differences between two runtimes that differ
only in these figures isolate the term."""

import os

import pytest

from costmodel import evaluate
from costmodel.errors import InputError
from costmodel.inputs.runtime import load_runtime

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", batch_size=2, prompt_len=100,
            gen_len=20)


def _runtime(tmp_path, step_s: float, per_rank_s: float | None) -> str:
    """tests/data/unit-rt.yaml with ``step_overhead_s`` and (when given) ``step_overhead_per_rank_s``."""
    text = open(f"{D}/unit-rt.yaml").read().replace("step_overhead_s: {value: 0.0", f"step_overhead_s: {{value: {step_s!r}")
    if per_rank_s is not None:
        text += f"step_overhead_per_rank_s: {{value: {per_rank_s!r}, source: test}}\n"
    p = tmp_path / f"rt-{step_s!r}-{per_rank_s!r}.yaml"      # one file per profile (loads are cached by path)
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("n_devices, pp, extra_s", [
    (1, 1, 0.0),            # one rank: 0.5 ms × (1 − 1) = 0
    (4, 1, 1.5e-3),         # TP4: 0.5 ms × (4 − 1) = 1.5 ms
    (8, 2, 3.5e-3),         # TP4 × PP2: eight ranks, 0.5 ms × (8 − 1) = 3.5 ms
    (4, 2, 1.5e-3),         # TP2 × PP2: four ranks, 0.5 ms × 3 = 1.5 ms
])
def test_every_step_waits_for_the_ranks_beyond_the_first(tmp_path, n_devices, pp, extra_s):
    """A decoding step and the prefill (a step of its own) of a runtime with step_overhead_s = 1 ms and
    0.5 ms per rank beyond the first take extra_s longer than with the 1 ms alone."""
    rec = dict(BASE, n_devices=n_devices, pipeline_parallel=pp)
    flat = evaluate(dict(rec, runtime=_runtime(tmp_path, 1.0e-3, None)))
    ranked = evaluate(dict(rec, runtime=_runtime(tmp_path, 1.0e-3, 5.0e-4)))
    assert ranked["time_per_output_token_s"] - flat["time_per_output_token_s"] == pytest.approx(extra_s, abs=1e-12)
    assert ranked["ttft_s"] - flat["ttft_s"] == pytest.approx(extra_s, abs=1e-12)


def test_the_step_overhead_itself_is_paid_once_per_step_at_any_rank_count(tmp_path):
    """step_overhead_s = 1 ms over a runtime without it: 1 ms per step at one rank and at four
    (the per-rank term is 0 in both runtimes)."""
    for n in (1, 4):
        rec = dict(BASE, n_devices=n)
        none = evaluate(dict(rec, runtime=_runtime(tmp_path, 0.0, 0.0)))
        one = evaluate(dict(rec, runtime=_runtime(tmp_path, 1.0e-3, 0.0)))
        assert one["time_per_output_token_s"] - none["time_per_output_token_s"] == pytest.approx(1.0e-3, abs=1e-12)


def test_serving_prompt_steps_wait_for_the_same_ranks(tmp_path):
    """The serving layer's step costs take the same term: a step that only schedules prompts on four
    ranks pays 1 ms + 0.5 ms × 3 = 2.5 ms of it."""
    from costmodel.inputs.record import parse_record
    from costmodel.serving.stepcost import StepCosts
    rec = parse_record(dict(BASE, n_devices=4, runtime=_runtime(tmp_path, 1.0e-3, 5.0e-4)))
    assert StepCosts(rec, max_num_seqs=4, max_tokens=256, max_context=200.0).step_overhead_s == pytest.approx(2.5e-3, abs=1e-15)


def test_the_vllm_profile_charges_its_ranks():
    """vLLM runs a worker process per device above one: its profile gives the per-rank term, and an
    8-GPU instance waits step_overhead_s + 7 × step_overhead_per_rank_s per step."""
    rt = load_runtime("vllm")
    assert rt.step_overhead_per_rank_s > 0
    assert rt.step_host_s(8) == pytest.approx(rt.step_overhead_s + 7 * rt.step_overhead_per_rank_s, rel=1e-12)
    assert rt.step_host_s(1) == rt.step_overhead_s


@pytest.mark.parametrize("value", ["-1.0e-4", "0.5"])
def test_out_of_range_per_rank_host_work_is_an_input_error(tmp_path, value):
    p = tmp_path / "bad.yaml"
    p.write_text(open(f"{D}/unit-rt.yaml").read() + f"step_overhead_per_rank_s: {{value: {value}, source: test}}\n")
    with pytest.raises(InputError, match="step_overhead_per_rank_s"):
        load_runtime(str(p))


def test_per_rank_values_as_an_array_evaluate_at_once():
    """Calibration evaluates many parameter values in one array: 1 ms + [0, 0.5, 1] ms × (4 − 1)
    = [1, 2.5, 4] ms."""
    import dataclasses
    import numpy as np
    rt = dataclasses.replace(load_runtime("vllm"), step_overhead_s=1.0e-3,
                             step_overhead_per_rank_s=np.array([0.0, 5.0e-4, 1.0e-3]))
    assert np.allclose(rt.step_host_s(4), [1.0e-3, 2.5e-3, 4.0e-3], rtol=0, atol=1e-15)


def test_v0_versions_do_not_take_the_v1_per_rank_figure():
    """The per-rank figure describes V1's multiprocess executor; the V0 entries (vllm@0.5, vllm@0.6)
    set their own (0: no source gives V0's), so a 4-GPU V0 step waits step_overhead_s + 0 × 3 beside
    its version's host work."""
    assert load_runtime("vllm").step_overhead_per_rank_s > 0
    for v in ("vllm@0.5", "vllm@0.6"):
        rt = load_runtime(v)
        assert rt.step_overhead_per_rank_s == 0.0 and rt.step_host_s(4) == rt.step_overhead_s


def test_v0_versions_set_their_own_step_overhead():
    """The fitted step_overhead_s stands for what the V1 engine leaves on the critical path; the V0
    entries' host work is their sourced host_step_s + host_per_seq_s, so a fitted profile with
    step_overhead_s = 5 ms keeps 5 ms for the bare id and gives 0 under vllm@0.5 and vllm@0.6: a
    4-GPU V0 step waits 0 + 0 × 3 = 0 s of profile host work beside its version's."""
    import dataclasses

    from costmodel.inputs.runtime import with_version
    fitted = dataclasses.replace(load_runtime("vllm"), step_overhead_s=5.0e-3)
    assert with_version(fitted, "vllm").step_overhead_s == 5.0e-3
    for v in ("vllm@0.5", "vllm@0.6"):
        rt = with_version(fitted, v)
        assert rt.step_overhead_s == 0.0 and rt.step_host_s(4) == 0.0
        assert rt.host_step_s > 0 and rt.host_per_seq_s > 0


def test_v0_rows_cannot_teach_the_v1_step_overhead():
    """Calibration: over V0 rows alone, moving step_overhead_s over its whole range moves no
    prediction (the versions replace it), so the fit keeps it out (``identifiable``) and a fold
    whose only vLLM rows are V0 rows keeps the prior instead of learning V1's host work from them."""
    from costmodel.calibration import calibrate
    from costmodel.calibration.validate import parse_measurement
    rows = [parse_measurement({"id": f"v{i}", "metric": "e2e_latency_s", "value": 14.6, "model": "llama-2-70b",
                               "hardware": "a100-80gb", "n_devices": 4, "runtime": rt, "batch_size": 64,
                               "prompt_len": 256, "gen_len": 256})
            for i, rt in enumerate(("vllm@0.5", "vllm@0.6"))]
    seen = calibrate.identifiable("vllm", rows, ("bandwidth_efficiency", "step_overhead_s"))
    assert seen == ("bandwidth_efficiency",)
    bare = [parse_measurement({"id": "v", "metric": "e2e_latency_s", "value": 14.6, "model": "llama-2-70b",
                               "hardware": "a100-80gb", "n_devices": 4, "runtime": "vllm", "batch_size": 64,
                               "prompt_len": 256, "gen_len": 256})]
    assert calibrate.identifiable("vllm", bare, ("bandwidth_efficiency", "step_overhead_s")) == (
        "bandwidth_efficiency", "step_overhead_s")
