"""Per-step host work of speculation, counted from the methods' code (not fitted), and the fit's
rule that a parameter a fold's rows cannot see keeps its prior."""

from __future__ import annotations

import pytest
import yaml

from costmodel import evaluate
from costmodel.calibration import calibrate
from costmodel.calibration.validate import load_measurements
from costmodel.engine.strategies.common import spec_method, spec_step_host_s
from costmodel.errors import InputError
from costmodel.inputs.runtime import load_runtime, parse_runtime
from costmodel.inputs.specs import zoo_dir

BASE = dict(model="vicuna-7b", hardware="a100-80gb", runtime="eager", weight_dtype="fp16",
            batch_size=1, prompt_len=256, gen_len=256)


def _eager_yaml():
    return yaml.safe_load((zoo_dir("runtimes") / "eager.yaml").read_text())


def test_method_of_a_record():
    assert spec_method("medusa") == "medusa"
    assert spec_method("eagle") == "eagle"
    assert spec_method("none") == "none"
    assert spec_method("self") == "self"
    assert spec_method("vicuna-68m") == "model"
    # an EAGLE-3 head and DeepSeek's MTP module run through the runtimes' EAGLE path; suffix drafting
    # has no draft pass: as none
    assert [spec_method(k) for k in ("eagle3", "mtp", "suffix")] == ["eagle", "eagle", "none"]


def _bare_runtime_file(tmp_path):
    """The eager profile without per-step speculation host work, as a runtime file."""
    d = _eager_yaml()
    del d["spec_step_host_ops"], d["spec_step_syncs"]
    p = tmp_path / "eager-bare.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


def test_medusa_step_host_work_by_hand():
    # eager: Medusa 32 operations and 7 syncs per step; an A100 launch 2.52 us + PCIe round trip 8.0 us;
    # host_per_kernel_s h = 20 us: 32 x 20 us + 7 x 10.52 us = 640 + 73.64 = 713.64 us
    from costmodel import load_hardware, load_model
    from costmodel.engine.execution import Exec
    d = _eager_yaml()
    d["host_per_kernel_s"]["value"] = 2.0e-5
    rt = parse_runtime(d, "eager.yaml")
    assert rt.spec_host_ops("medusa") == 32 and rt.spec_syncs("medusa") == 7
    ex = Exec(model=load_model("vicuna-7b"), hw=load_hardware("a100-80gb"), rt=rt)
    assert spec_step_host_s(ex, "medusa") == pytest.approx(713.64e-6, rel=1e-12)
    # a separate draft model: 25 operations, 4 syncs: 500 + 42.08 = 542.08 us
    assert spec_step_host_s(ex, "model") == pytest.approx(542.08e-6, rel=1e-12)


def test_tree_step_pays_the_counted_host_work(tmp_path):
    # the same Medusa tree with the counts zeroed is faster by exactly 32 h + 7 (launch + link)
    rec = dict(BASE, strategy="tree", draft_model="medusa", tree_nodes=26, tree_depth=4, mean_accepted_tokens=2.3)
    rt = load_runtime("eager")
    with_work = evaluate(rec)["step_latency_s"]
    without = evaluate(dict(rec, runtime=_bare_runtime_file(tmp_path)))["step_latency_s"]
    expected = 32 * rt.host_per_kernel_s + 7 * (2.52e-6 + 8.0e-6)
    assert with_work - without == pytest.approx(expected, rel=1e-9)


def test_autoregressive_step_pays_no_speculation_host_work(tmp_path):
    a = evaluate(dict(BASE, strategy="autoregressive"))["step_latency_s"]
    b = evaluate(dict(BASE, strategy="autoregressive", runtime=_bare_runtime_file(tmp_path)))["step_latency_s"]
    assert a == b


@pytest.mark.parametrize("value, field", [({"medusa": -1}, "spec_step_host_ops.value.medusa"),
                                          ({"hydra": 3}, "spec_step_host_ops.value.hydra"),
                                          (12, "spec_step_host_ops.value")])
def test_bad_counts_are_input_errors(value, field):
    d = _eager_yaml()
    d["spec_step_host_ops"]["value"] = value
    with pytest.raises(InputError) as e:
        parse_runtime(d, "eager.yaml")
    assert field in str(e.value)


def test_unseen_parameter_keeps_its_prior():
    # batch-1 autoregressive decode of a 7B model in eager mode is host-bound and its GEMVs are memory
    # bound: the compute efficiency moves no prediction, so it is not fitted (it used to drift to 0.05)
    ar = [m for m in load_measurements() if m.runtime == "eager" and m.record.strategy == "autoregressive"
          and m.metric != "fits"]
    assert ar
    names = calibrate.identifiable("eager", ar, calibrate.FIT_PARAMS["eager"])
    assert "compute_efficiency" not in names and "host_per_kernel_s" in names
    fit = calibrate.fit_runtime("eager", ar, max_nfev=0)
    assert fit["params"]["compute_efficiency"] == calibrate.PRIORS["eager"]["compute_efficiency"]
    assert fit["kept_prior"] == ["compute_efficiency"]
