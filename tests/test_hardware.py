import os

import pytest
import yaml

from costmodel import InputError, evaluate, load_hardware
from costmodel.inputs.specs import zoo_dir, zoo_ids

IDS = ("t4", "a10g", "l4", "l40s", "v100", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "rtx-3090",
       "rtx-4090", "orin-agx-64gb", "orin-agx-32gb", "mi250x", "mi300x")


def test_every_listed_hardware_id_exists_and_carries_sources():
    assert set(IDS) <= set(zoo_ids("hardware_specs"))
    for i in IDS:
        h = load_hardware(i)
        assert h.sources, i
        assert 0 < h.usable_bytes <= h.capacity_bytes
        assert h.bandwidth_bytes_per_s > 0 and h.matrix_peak("fp16") > 0


def _broken(tmp_path, mutate):
    data = yaml.safe_load(open(os.path.join(zoo_dir("hardware_specs"), "t4.yaml")))
    mutate(data)
    p = tmp_path / "broken.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_missing_field_names_file_and_field(tmp_path):
    p = _broken(tmp_path, lambda d: d["memory"].pop("bandwidth_bytes_per_s"))
    with pytest.raises(InputError) as e:
        load_hardware(p)
    assert "broken.yaml" in str(e.value) and "memory.bandwidth_bytes_per_s" in str(e.value)


def test_mistyped_field_names_file_and_field(tmp_path):
    # PyYAML reads 312e12 (no dot, no sign) as a string: the loader must say so
    p = _broken(tmp_path, lambda d: d["compute"]["matrix_flops_per_s"].__setitem__("fp16", "312e12"))
    with pytest.raises(InputError) as e:
        load_hardware(p)
    msg = str(e.value)
    assert "compute.matrix_flops_per_s.fp16" in msg and "3.12e+14" in msg


def test_unsupported_dtype_falls_back_to_vector_rate():
    t4 = load_hardware("t4")
    assert not t4.supports("bf16")
    assert t4.matrix_peak("bf16") == t4.vector_flops_per_s
    fp16 = evaluate(dict(model="llama-2-7b", hardware="t4", batch_size=8, prompt_len=512, weight_dtype="fp16"))
    bf16 = evaluate(dict(model="llama-2-7b", hardware="t4", batch_size=8, prompt_len=512, weight_dtype="bf16"))
    assert bf16["ttft_s"] > 5 * fp16["ttft_s"]      # bf16 GEMMs run without tensor cores on Turing


def test_moe_reads_distinct_experts():
    # Mixtral: at batch 1 a token touches 2 of 8 experts per layer; at batch 64 all 8 are read.
    # expert = 3·4096·14336 params; expected distinct experts for T tokens = 8·(1 − (6/8)^T)
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.ops import PassShape, layer_ops
    from costmodel.inputs.record import parse_record
    ex = build_exec(parse_record(dict(model="mixtral-8x7b", hardware="h100-sxm", batch_size=1, prompt_len=1)))
    expert_bytes = 3 * 4096 * 14336 * 2
    for T, distinct in ((1, 2.0), (64, 8 * (1 - 0.75 ** 64))):
        op = {o.name: o for o in layer_ops(PassShape(tokens=T, pairs=T, kv_hbm_tokens=0), ex)}["moe_ffn"]
        assert float(op.hbm_bytes) == pytest.approx(distinct * expert_bytes + T * 2 * 4096 * 2 * 2, rel=1e-9)


def test_explicit_tree_parents():
    # root → 1, 2; 1 → 3: τ = 1 + p1 + p2 + p1·p1 with p = (0.6, 0.2) = 2.16
    r = evaluate(dict(model="llama-2-7b", hardware="h100-sxm", batch_size=1, prompt_len=128, strategy="tree",
                      draft_model="medusa", tree_parents="0,0,1", rank_acceptance="0.6,0.2"))
    assert r["tokens_per_step"] == pytest.approx(2.16)
    assert r["tree_nodes"] == 3 and r["tree_depth"] == 2


def test_mi300x_kernel_gap_is_the_measured_mi300x_figure():
    """The MI300X's per-kernel gap is Kog AI's 8 × MI300X launch-plus-cleanup figure, ~4.5 µs per kernel
    (hardware_specs/mi300x.yaml, source kog_mi300x), not the MI210 proxy (2.06 / 1.97 µs); the hipGraph
    figure is 4.5 µs × the MI210 graph/stream ratio 1.97 / 2.06 = 4.3034 µs, written 4.30 µs. A vLLM decode
    step of Llama-3.1-70B over 8 MI300X replays one graph of kernels_per_layer × layers + kernels_per_pass
    = 10 × 80 + 8 = 808 kernels: 808 × 4.30 µs = 3.4744 ms of gaps, plus the runtime's host work per step,
    step_overhead_s + step_overhead_per_rank_s × (8 − 1)."""
    from costmodel.inputs.runtime import load_runtime
    hw = load_hardware("mi300x")
    assert hw.kernel_launch_s == 4.5e-6
    assert hw.graph_kernel_launch_s == pytest.approx(4.5e-6 * 1.97 / 2.06, rel=1e-3)
    rt = load_runtime("vllm")
    assert (rt.kernels_per_layer, rt.kernels_per_pass) == (10, 8)
    out = evaluate(dict(model="llama-3.1-70b", hardware="mi300x", n_devices=8, weight_dtype="fp8", kv_dtype="fp16",
                        runtime="vllm", batch_size=1, prompt_len=128, gen_len=2048))
    host_s = rt.step_overhead_s + rt.step_overhead_per_rank_s * 7
    assert out["time_launch_s"] == pytest.approx(808 * 4.30e-6 + host_s, rel=1e-12)
