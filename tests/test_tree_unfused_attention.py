"""Research code's unfused tree attention: the token-tree methods' own Llama file computes attention
op by op over the tree mask (7 kernels per layer where plain HF decoding launches one SDPA kernel),
so a tree verification pass launches more kernels and materialises its scores in HBM."""

from __future__ import annotations

import pytest
import yaml

from costmodel import evaluate, load_hardware, load_model
from costmodel.engine.evaluate import evaluate_passes
from costmodel.engine.execution import Exec
from costmodel.engine.strategies.tree import unfused_score_bytes, unfused_tree_attention_op
from costmodel.errors import InputError
from costmodel.inputs.runtime import load_runtime, parse_runtime
from costmodel.inputs.specs import zoo_dir

BASE = dict(model="vicuna-7b", hardware="a100-80gb", runtime="eager", weight_dtype="fp16",
            batch_size=1, prompt_len=256, gen_len=256)


def _eager_yaml():
    return yaml.safe_load((zoo_dir("runtimes") / "eager.yaml").read_text())


def _fused_runtime_file(tmp_path):
    """The eager profile with the tree attention fused (the field removed), as a runtime file."""
    d = _eager_yaml()
    del d["tree_attention_kernels_per_layer"]
    p = tmp_path / "eager-fused.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


def test_score_bytes_by_hand():
    # fp16 (2 bytes): QK^T writes 2, scale 2 + 2, mask add 2 + 2, fp32 softmax 2 + 4, cast 4 + 2, PV reads 2 = 24
    assert unfused_score_bytes(2.0) == 24.0


def test_unfused_op_by_hand():
    # vicuna-7b: 32 layers, 32 heads; eager: 7 attention kernels per layer -> 6 more per layer, 192 per pass
    # B = 1, q = 64 (63 nodes + root), L = 300: scores 32 x 64 x (300 + 64) = 745,472 per layer,
    # x 24 bytes = 17,891,328 bytes per layer, over its 6 extra kernels: 2,981,888 bytes each
    ex = Exec(model=load_model("vicuna-7b"), hw=load_hardware("a100-80gb"), rt=load_runtime("eager"))
    op = unfused_tree_attention_op(ex, 1.0, 64.0, 300.0)
    assert op.count == 192
    assert float(op.hbm_bytes) == pytest.approx(2_981_888.0, rel=1e-12)
    assert float(op.hbm_bytes) * op.count == pytest.approx(32 * 17_891_328.0, rel=1e-12)


def test_fused_runtime_has_no_unfused_op():
    ex = Exec(model=load_model("vicuna-7b"), hw=load_hardware("a100-80gb"), rt=load_runtime("vllm"))
    assert unfused_tree_attention_op(ex, 1.0, 64.0, 300.0) is None


def test_host_bound_tree_verify_pays_the_launches(tmp_path):
    # vicuna-7b on an A100 in eager is host-bound (~24 ms of launches vs ~10 ms of device work), so the
    # verification pass grows by exactly 192 launches x host_per_kernel_s
    rec = dict(BASE, strategy="tree", draft_model="medusa", tree_nodes=63, tree_depth=4, mean_accepted_tokens=2.3)
    h = load_runtime("eager").host_per_kernel_s
    unfused = evaluate_passes(rec)["verify"].cost.time_s
    fused = evaluate_passes(dict(rec, runtime=_fused_runtime_file(tmp_path)))["verify"].cost.time_s
    assert float(unfused - fused) == pytest.approx(192 * h, rel=1e-9)


def test_plain_and_chain_steps_unchanged(tmp_path):
    # only a token-tree verification runs the research code's tree attention
    for rec in (dict(BASE, strategy="autoregressive"),
                dict(BASE, strategy="speculative", draft_model="none", gamma=10, mean_accepted_tokens=1.7)):
        a = evaluate(rec)["step_latency_s"]
        b = evaluate(dict(rec, runtime=_fused_runtime_file(tmp_path)))["step_latency_s"]
        assert a == b


@pytest.mark.parametrize("value", [0.5, 101, "seven"])
def test_bad_kernel_counts_are_input_errors(value):
    d = _eager_yaml()
    d["tree_attention_kernels_per_layer"]["value"] = value
    with pytest.raises(InputError) as e:
        parse_runtime(d, "eager.yaml")
    assert "tree_attention_kernels_per_layer" in str(e.value)
