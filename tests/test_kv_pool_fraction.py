"""The runtime's KV pool (StepCosts.kv_capacity_tokens): vLLM keeps gpu_memory_utilization = 0.9 of the
device total for weights, activations and KV (basis ``total``); TensorRT-LLM gives the KV cache 0.9 of
the memory still free after the engine is loaded (basis ``free``)."""

import dataclasses

import numpy as np
import pytest

from costmodel.engine import memory
from costmodel.inputs.record import parse_record
from costmodel.inputs.runtime import load_runtime
from costmodel.serving.stepcost import StepCosts


def test_profiles_carry_their_engines_kv_memory_rule():
    assert (load_runtime("vllm").kv_pool_fraction, load_runtime("vllm").kv_pool_basis) == (0.9, "total")
    assert (load_runtime("trt-llm").kv_pool_fraction, load_runtime("trt-llm").kv_pool_basis) == (0.9, "free")
    assert load_runtime("eager").kv_pool_fraction is None


def _costs(runtime):
    rec = parse_record(dict(model="llama-3-8b", hardware="h100-sxm", runtime=runtime, batch_size=1,
                            prompt_len=512, gen_len=128))
    return StepCosts(rec, 16, 2048, 1024.0)


@pytest.mark.parametrize("runtime", ["vllm", "trt-llm"])
def test_kv_pool_by_hand(runtime):
    """rest = usable − weights − activations − overhead (what the pool was without a fraction); with
    f = 0.9: basis total (vLLM) → rest − 0.1·usable, basis free (TensorRT-LLM) → 0.9·rest. Llama-3-8B
    bf16 KV: 32 layers × 8 heads × 128 × 2 × 2 B = 131,072 B per token."""
    sc = _costs(runtime)
    ex = sc.ex
    assert sc.kv_bytes_per_token() == 32 * 8 * 128 * 2 * 2 == 131_072
    acts = float(np.ravel(memory.activation_bytes(ex, 2048, 16 * 8))[0])
    rest = ex.hw.usable_bytes - memory.weights_device_bytes(ex) - acts - ex.rt.memory_overhead_bytes
    pool = rest - 0.1 * ex.hw.usable_bytes if runtime == "vllm" else 0.9 * rest
    assert sc.kv_capacity_tokens(2048) == int(pool // 131_072)
    # without the fraction the whole rest is the pool: the rule takes 0.1·usable (vLLM) or 0.1·rest
    sc.ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, kv_pool_fraction=None))
    assert sc.kv_capacity_tokens(2048) == int(rest // 131_072)


def test_vllm_keeps_a_tenth_of_an_h100_out_of_its_pool():
    """H100 SXM usable 85,017,755,648 B (hardware_specs/h100-sxm.yaml): vLLM's 0.9 leaves 8,501,775,565 B
    outside the pool, 8,501,775,565 / 131,072 = 64,863.4 Llama-3-8B tokens fewer (±1 for the floors)."""
    sc = _costs("vllm")
    with_rule = sc.kv_capacity_tokens(2048)
    sc.ex = dataclasses.replace(sc.ex, rt=dataclasses.replace(sc.ex.rt, kv_pool_fraction=None))
    assert abs((sc.kv_capacity_tokens(2048) - with_rule) - 64_863.4) <= 1.0
