"""The ablation table's switches turn off exactly the mechanism they name (validation/REPORT.md,
"Ablation"): each switch is checked on the profile or record it rewrites."""

from __future__ import annotations

from types import SimpleNamespace

from costmodel.calibration import calibrate as c


def _with(patch: dict):
    """Apply a switch's module-level overrides (not its record rewrite) and return a restorer."""
    saved = {k: getattr(c, k) for k in patch if k != "records"}
    for k, v in patch.items():
        if k != "records":
            setattr(c, k, v)
    return lambda: [setattr(c, k, v) for k, v in saved.items()]


def test_custom_allreduce_switch_gives_vllm_nccl_and_unpins_rows():
    assert c.prior_runtime("vllm").tp_allreduce == "custom"          # shipped: vLLM's own kernel
    patch = c.ABLATIONS["custom all-reduce kernels (vLLM; off: NCCL)"]()
    restore = _with(patch)
    try:
        assert c.prior_runtime("vllm").tp_allreduce == "auto"
    finally:
        restore()
    rewrite = patch["records"]
    assert rewrite(SimpleNamespace(allreduce_algorithm="custom")) == {"allreduce_algorithm": "auto"}
    assert rewrite(SimpleNamespace(allreduce_algorithm="ring")) == {}


def test_per_rank_switch_fixes_the_term_at_zero_and_stops_fitting_it():
    patch = c.ABLATIONS["host work per worker rank (vLLM; off: one flat step overhead)"]()
    assert "step_overhead_per_rank_s" in c.FIT_PARAMS["vllm"]
    assert patch["FIT_PARAMS"]["vllm"] == ("bandwidth_efficiency", "step_overhead_s")
    assert patch["PRIORS"]["vllm"]["step_overhead_per_rank_s"] == 0.0
    restore = _with(patch)
    try:
        assert c.prior_runtime("vllm").step_overhead_per_rank_s == 0.0
    finally:
        restore()
    assert c.prior_runtime("vllm").step_overhead_per_rank_s == c.PRIORS["vllm"]["step_overhead_per_rank_s"]


def test_mma_sync_switch_gives_hopper_its_dense_rate():
    rewrite = c.ABLATIONS["MoE GEMMs at the mma.sync rate on Hopper (TensorRT-LLM <= 0.9)"]()["records"]
    from costmodel.inputs.hardware import load_hardware
    assert load_hardware("h100-sxm").mma_sync_matrix_fraction < 1.0            # 0.667 shipped
    assert rewrite(SimpleNamespace(hardware="h100-sxm"))["hardware"].mma_sync_matrix_fraction == 1.0


def test_unfused_tree_attention_switch_clears_the_eager_kernel_count():
    assert c.prior_runtime("eager").tree_attention_kernels_per_layer == 7      # Medusa's modeling_llama_kv.py
    restore = _with(c.ABLATIONS["unfused tree attention in research code (eager)"]())
    try:
        assert c.prior_runtime("eager").tree_attention_kernels_per_layer is None
    finally:
        restore()


def test_fp16_attention_switch_gives_every_profile_fp8_attention():
    """Off: the base profiles (prior_runtime) and the rows' versioned profiles (the record rewrite,
    which hands the row's version over whole) both run an fp8 engine's attention in fp8."""
    from costmodel.inputs.runtime import with_version
    name = "fp8 engines' attention in fp16 (TensorRT-LLM <= 0.9)"
    assert not c.prior_runtime("trt-llm@0.9").fp8_context_fmha                 # shipped: fp16 kernels
    patch = c.ABLATIONS[name]()
    restore = _with(patch)
    try:
        assert c.prior_runtime("trt-llm@0.9").fp8_context_fmha
    finally:
        restore()
    given = patch["records"](SimpleNamespace(runtime="trt-llm@0.9"))["runtime"]
    assert with_version(c.prior_runtime("trt-llm"), given).fp8_context_fmha
    assert patch["records"](SimpleNamespace(runtime="trt-llm")) == {}
