"""Hand-computed costs on a made-up device (tests/data/unit-hw.yaml: 1e12 B/s, 1e14 FLOP/s, no
launch cost, efficiency 1) and a tiny model (tests/data/unit-model.yaml)."""

import math
import os

import numpy as np
import pytest

from costmodel import evaluate
from costmodel.inputs.hardware import Link
from costmodel.engine.parallel import allreduce_time_s

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml")


def test_ar_decode_step_by_hand():
    # unit-model: 2 layers, d=64, 4 heads, 2 KV heads, head_dim 16, d_ff 128 (gated), vocab 1000; fp16.
    # Mean context L = prompt 100 + gen 2 / 2 = 101. Every operator is memory-bound (≈1 FLOP/B): the
    # elementwise ones and attention take bytes / 1e12; a GEMM takes √(c² + m²) with c = 2·params /
    # 1e14 and m = bytes / 1e12 (roofline.gemm_overlap), i.e. m·(1 + ~5e-5). Bytes per layer:
    norm = 6 * 64 * 2                       # 768: two norms + residual, read/write
    qkv = 64 * 128 * 2 + (64 + 128) * 2     # 16,768: weights + activations in/out
    kv_tok = 2 * 2 * 16 * 2                 # 128 B of K and V per token per layer
    attn = 101 * kv_tok + kv_tok + 2 * 64 * 2   # 13,312: read context KV, write new KV, q and o
    o = 64 * 64 * 2 + 128 * 2               # 8,448
    ffn = 3 * 64 * 128 * 2 + 128 * 2        # 49,408
    act = 3 * 128 * 2                       # 768: gate/up read, product written
    head = 1000 * 64 * 2 + 64 * 2 + 1000 * 4   # 132,128: LM head weights, input, fp32 logits
    embed = 2 * 64 * 2

    def gemm(params, nbytes):
        return math.sqrt((2 * params / 1e14) ** 2 + (nbytes / 1e12) ** 2)

    per_layer = ((norm + attn + act) / 1e12 + gemm(64 * 128, qkv) + gemm(64 * 64, o)
                 + gemm(3 * 64 * 128, ffn))
    expected_s = 2 * per_layer + gemm(1000 * 64, head) + embed / 1e12
    r = evaluate(dict(BASE, batch_size=1, prompt_len=100, gen_len=2))
    assert r["step_latency_s"] == pytest.approx(expected_s, rel=1e-12)
    assert r["bound"] == "memory"
    assert r["tokens_per_s_per_seq"] == pytest.approx(1 / expected_s)


def test_weights_and_kv_memory_by_hand():
    # params: per layer 64·(64+2·32) + 64·64 + 3·64·128 + 2·64 = 8192 + 4096 + 24576 + 128 = 36,992
    # total = 2·36,992 + 2·1000·64 + 64 = 202,048 → 404,096 bytes in fp16
    r = evaluate(dict(BASE, batch_size=3, prompt_len=100, gen_len=20))
    assert r["weights_bytes"] == 404_096
    # KV: 3 sequences × (100 + 20) tokens × 2 layers × 128 B
    assert r["kv_cache_bytes"] == 3 * 120 * 2 * 128


def test_compute_bound_gemm_by_hand():
    # 4096 tokens through the tiny model's FFN: 2·24,576·4096 FLOPs = 2.01e8 → c = 2.013e-6 s at 1e14,
    # vs bytes 49,152 + 4096·128·2 = 1,097,728 → m = 1.098e-6 s at 1e12: compute-bound, and the GEMM
    # takes √(c² + m²) = 2.293e-6 s (the overlap of math and weight stream near the ridge)
    from costmodel.engine.ops import PassShape, layer_ops
    from costmodel.engine.roofline import op_time
    from costmodel.engine.evaluate import build_exec
    from costmodel.inputs.record import parse_record
    ex = build_exec(parse_record(dict(BASE, batch_size=1, prompt_len=1)))
    ops = {o.name: o for o in layer_ops(PassShape(tokens=4096, pairs=4096, kv_hbm_tokens=0), ex)}
    t, idx = op_time(ops["ffn"], ex)
    c, m = 2 * 24576 * 4096 / 1e14, (49152 + 4096 * 128 * 2) / 1e12
    assert float(t) == pytest.approx(math.sqrt(c * c + m * m), rel=1e-12)
    assert int(idx) == 0
    # far from the ridge a GEMM is its binding term to within (1/2)·(min/max)²: one token, ~5e-5
    one = {o.name: o for o in layer_ops(PassShape(tokens=1, pairs=1, kv_hbm_tokens=0), ex)}["ffn"]
    t1, i1 = op_time(one, ex)
    m1 = (49152 + 128 * 2) / 1e12
    assert int(i1) == 1 and m1 < float(t1) < m1 * (1 + 1e-4)


def test_ring_allreduce_by_hand():
    link = Link("x", bandwidth_bytes_per_s=1e11, latency_s=1e-5)
    # n = 4, S = 1 MB: 2·3·1e-5 + 2·3/4 · 1e6/1e11 = 6e-5 + 1.5e-5
    assert allreduce_time_s(1e6, 4, link) == pytest.approx(7.5e-5)
    # tree: 2·log2(4)·1e-5 + 2·1e6/1e11 = 4e-5 + 2e-5
    assert allreduce_time_s(1e6, 4, link, "tree") == pytest.approx(6e-5)
    assert allreduce_time_s(1e6, 1, link) == 0


def test_tp_adds_allreduce_and_splits_weights():
    one = evaluate(dict(BASE, batch_size=1, prompt_len=100, gen_len=2))
    two = evaluate(dict(BASE, batch_size=1, prompt_len=100, gen_len=2, n_devices=2))
    assert two["memory_target_weights_bytes"] == pytest.approx(one["memory_target_weights_bytes"] / 2)
    # 2 layers × 2 all-reduces × (2·1·1e-5 + 2·1/2·(64·2 B)/1e11) of pure interconnect time
    assert two["time_interconnect_s"] == pytest.approx(4 * (2e-5 + 128 / 1e11))


def test_int4_weights_carry_scale_overhead():
    r16 = evaluate(dict(BASE, batch_size=1, prompt_len=10))
    r4 = evaluate(dict(BASE, batch_size=1, prompt_len=10, weight_dtype="int4"))
    # int4 = 0.5 B + an fp16 scale and zero per 128 weights = 0.53125 B per weight (the unit runtime has
    # no format of its own: the default layout); the norms (2·64 per layer + 64 final = 320 weights) are
    # not Linear weights and stay fp16: (202,048 − 320)·0.53125 + 320·2 = 107,168 + 640
    assert r16["weights_bytes"] == pytest.approx(2 * 202_048)
    assert r4["weights_bytes"] == pytest.approx(201_728 * 0.53125 + 320 * 2)


def test_kernel_launch_and_host_overheads(tmp_path):
    rt = (open(f"{D}/unit-rt.yaml").read().replace("kernels_per_layer: {value: 0", "kernels_per_layer: {value: 10")
          .replace("host_per_kernel_s: {value: 0.0", "host_per_kernel_s: {value: 1.0e-03"))
    p = tmp_path / "rt.yaml"
    p.write_text(rt)
    r = evaluate(dict(BASE, runtime=str(p), batch_size=1, prompt_len=10))
    # host issues 2 layers × 10 kernels at 1 ms each = 20 ms, far above the device time: launch-bound
    assert r["step_latency_s"] == pytest.approx(0.020)
    assert r["bound"] == "launch"


def test_vectorised_core_matches_scalar_calls():
    from costmodel.engine.evaluate import evaluate_arrays
    from costmodel.inputs.record import parse_record
    rec = parse_record(dict(BASE, batch_size=1, prompt_len=1, strategy="speculative", draft_model="self",
                            acceptance_rate=0.7))
    B = np.array([1, 4, 16])
    P = np.array([10, 100, 1000])
    res = evaluate_arrays(rec, {"batch_size": B, "prompt_len": P})
    for i in range(3):
        one = evaluate(dict(BASE, batch_size=int(B[i]), prompt_len=int(P[i]), strategy="speculative",
                            draft_model="self", acceptance_rate=0.7))
        assert res["step_latency_s"][i] == pytest.approx(one["step_latency_s"], rel=1e-12)
        assert res["speedup_vs_ar"][i] == pytest.approx(one["speedup_vs_ar"], rel=1e-12)


def test_chunked_prefill_caps_activation_memory(tmp_path):
    # 4 prompts × 1000 tokens = 4000 tokens; chunks of 1000 tokens → 4 passes, 1000 tokens of activations.
    rt = open(f"{D}/unit-rt.yaml").read() + "prefill_chunk_tokens: {value: 1000, source: test}\n"
    p = tmp_path / "rt.yaml"
    p.write_text(rt)
    one = evaluate(dict(BASE, batch_size=4, prompt_len=1000, gen_len=2))
    chunked = evaluate(dict(BASE, runtime=str(p), batch_size=4, prompt_len=1000, gen_len=2))
    # activations of a pass of T tokens: T·(2·64 + (64 + 64) + 64 + 3·128)·2 B + logits 4 prompts·1000·4 B
    per_token = (2 * 64 + 128 + 64 + 3 * 128) * 2
    assert one["memory_activations_bytes"] == pytest.approx(4000 * per_token + 4 * 1000 * 4)
    assert chunked["memory_activations_bytes"] == pytest.approx(1000 * per_token + 4 * 1000 * 4)
    # same FLOPs, but the 404 kB of weights are read 4 times instead of once: never faster
    assert chunked["ttft_s"] >= one["ttft_s"]


def test_weight_only_int4_gemm_pays_dequantisation_on_the_vector_units():
    """Llama-2-7B FFN (3·4096·11008 = 135 266 304 weights per layer) in int4 under TensorRT-LLM
    (4 vector FLOPs per weight, runtimes/trt-llm.yaml) on an A100-80GB (19.5 TFLOP/s fp32, runtime
    compute efficiency 1.0): 541 065 216 dequantisation FLOPs per layer = 27.747 µs, on top of the
    matrix term 2·135 266 304 / (312e12·0.84) = 1.03225 µs at one token. fp16 weights: none."""
    from costmodel.inputs.hardware import load_hardware
    from costmodel.inputs.model import load_model
    from costmodel.engine.execution import Exec
    from costmodel.engine.ops import PassShape, layer_ops
    from costmodel.engine.roofline import op_terms
    from costmodel.inputs.runtime import load_runtime

    m, hw, rt = load_model("llama-2-7b"), load_hardware("a100-80gb"), load_runtime("trt-llm")
    shape = PassShape(tokens=1.0, pairs=1.0, kv_hbm_tokens=1.0)
    ffn = {op.name: op for op in layer_ops(shape, Exec(m, hw, rt, weight_dtype="int4"))}["ffn"]
    assert float(ffn.dequant_flops) == 541_065_216.0
    compute = float(op_terms(ffn, Exec(m, hw, rt, weight_dtype="int4"))[0])
    assert compute == pytest.approx(27.747e-6 + 1.03225e-6, rel=1e-4)
    fp16 = {op.name: op for op in layer_ops(shape, Exec(m, hw, rt, weight_dtype="fp16"))}["ffn"]
    assert fp16.dequant_flops == 0.0
    assert float(op_terms(fp16, Exec(m, hw, rt, weight_dtype="fp16"))[0]) == pytest.approx(1.03225e-6, rel=1e-4)


# ------------------------------------------------- per-SM bandwidth cap (Runtime.sm_bandwidth_bytes_per_s)

def _capped_runtime(tmp_path, extra: str, name: str = "rt") -> str:
    from costmodel.inputs.specs import resolve
    base = resolve("runtimes", "llama.cpp", "runtime").read_text(encoding="utf-8")
    keep = "\n".join(line for line in base.splitlines()
                     if not line.startswith(("sm_bandwidth_bytes_per_s", "bandwidth_efficiency")))
    p = tmp_path / f"{name}.yaml"          # a new path per content: runtimes are cached by path
    p.write_text(keep + "\nbandwidth_efficiency: {value: 1.0, source: test}\n" + extra + "\n")
    return str(p)


def test_sm_bandwidth_caps_big_hbm_parts_and_spares_a_gddr_card(tmp_path):
    """9 GB/s per SM (a kernel's bytes in flight over DRAM latency): the A100-80GB's 108 SMs pull at
    most 108 · 9e9 = 0.972 TB/s, below its 2.039 TB/s · 0.9 measured stream fraction; the RTX 4090's
    128 SMs could pull 1.152 TB/s, above its own 1.008 TB/s · efficiency, so its peak binds."""
    from costmodel.engine.evaluate import build_exec
    from costmodel.inputs.hardware import load_hardware
    from costmodel.inputs.record import parse_record
    path = _capped_runtime(tmp_path, "sm_bandwidth_bytes_per_s: {value: 9.0e+9, source: test}")
    a100 = build_exec(parse_record(dict(model="llama-2-7b", hardware="a100-80gb", runtime=path,
                                        batch_size=1, prompt_len=1)))
    assert a100.hbm_bytes_per_s == pytest.approx(108 * 9.0e9, rel=1e-12)
    hw = load_hardware("rtx-4090")
    r4090 = build_exec(parse_record(dict(model="llama-2-7b", hardware="rtx-4090", runtime=path,
                                         batch_size=1, prompt_len=1)))
    assert 128 * 9.0e9 > hw.bandwidth_bytes_per_s * hw.memory_efficiency
    assert r4090.hbm_bytes_per_s == pytest.approx(1.008e12 * hw.memory_efficiency, rel=1e-12)
    # without the field nothing is capped: the A100 streams at its datasheet · measured fraction
    free = build_exec(parse_record(dict(model="llama-2-7b", hardware="a100-80gb", runtime=_capped_runtime(
        tmp_path, "", "free"), batch_size=1, prompt_len=1)))
    assert free.hbm_bytes_per_s == pytest.approx(2.039e12 * load_hardware("a100-80gb").memory_efficiency, rel=1e-12)
    # a decode step streams every weight at no more than the cap: >= 13.48 GB / 0.972 TB/s = 13.9 ms
    r = evaluate(dict(model="llama-2-7b", hardware="a100-80gb", runtime=path, batch_size=1, prompt_len=1))
    assert r["step_latency_s"] >= r["weights_bytes"] / (108 * 9.0e9)


@pytest.mark.parametrize("bad", ["5.0e+7", "2.0e+12", "fast"])
def test_sm_bandwidth_out_of_range_names_the_field(tmp_path, bad):
    from costmodel import InputError
    from costmodel.inputs.runtime import load_runtime
    path = _capped_runtime(tmp_path, f"sm_bandwidth_bytes_per_s: {{value: {bad}, source: test}}")
    with pytest.raises(InputError) as e:
        load_runtime(path)
    assert "sm_bandwidth_bytes_per_s.value" in str(e.value) and "rt.yaml" in str(e.value)


def test_moe_activations_hold_the_active_experts_ffn():
    """Mixtral-8x7B (d = 4096, q_dim 4096, kv_dim 1024, d_ff 14336, top-2) on one device, 1000 tokens, no
    logits: each token keeps its 2 experts' gate/up/act (3 · 2 · 14336 = 86,016) beside
    2·4096 + (4096 + 2·1024) + 4096 = 18,432 → 104,448 elements · 2 bytes · 1000 = 208,896,000 bytes."""
    from costmodel.engine import memory
    from costmodel.engine.evaluate import build_exec
    from costmodel.inputs.record import parse_record
    ex = build_exec(parse_record(dict(model="mixtral-8x7b", hardware="h100-sxm", batch_size=1, prompt_len=16)))
    assert float(memory.activation_bytes(ex, 1000, 0)) == 208_896_000
