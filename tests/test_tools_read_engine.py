"""Tools read the passes the engine priced (evaluate_passes), never a copy of them.

Llama-2-7B fp16 on one device: 32 layers, 32 KV heads of 128, so one token's K and V in one layer
take 2 · 32 · 128 · 2 B = 16,384 B; q_dim = 4096.
"""

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import evaluate_passes

# llama-2-7b-32k: the Llama-2-7B dimensions with a 32K context (Llama-2-7B stops at 4096 tokens)
SELF_DRAFT = dict(model="llama-2-7b-32k", hardware="a100-80gb", batch_size=32, prompt_len=8000, strategy="speculative",
                  draft_model="self", draft_kv_budget=256, gamma=4, acceptance_rate=0.8)


def _attention(ops, phase):
    return [o for o in ops if o["phase"] == phase and o["name"] == "attention"]


def test_engine_names_the_passes_it_priced():
    p = evaluate_passes(SELF_DRAFT)
    assert set(p) == {"prefill", "draft", "verify", "ar_decode"}
    r = evaluate(SELF_DRAFT)
    assert float(p["draft"].cost.time_s) == r["draft_time_per_step_s"]
    assert float(p["verify"].cost.time_s) == r["verify_time_s"]
    assert float(p["prefill"].cost.time_s) == r["ttft_s"]
    # the baseline step = its decode pass + the runtime's per-step host overhead
    overhead = p["ar_decode"].ex.rt.step_overhead_s
    assert r["ar_step_latency_s"] == pytest.approx(float(p["ar_decode"].cost.time_s) + overhead, rel=1e-15)


def test_roofline_plot_draft_pass_is_the_engines():
    pytest.importorskip("matplotlib")
    from costmodel.analysis.plots import roofline_data
    d = roofline_data(SELF_DRAFT)
    assert d["phase_time_s"]["draft pass"] == evaluate(SELF_DRAFT)["draft_time_per_step_s"]
    # each of the γ = 4 draft passes reads the 256-token KV budget, not the 8,064-token context:
    # per layer 32 sequences · 256 tokens · 16,384 B of KV + 32 new entries · 16,384 B written
    # + 32 tokens · 2 · 4096 · 2 B of q and o, over 32 layers
    per_pass = 32 * (32 * 256 * 16_384 + 32 * 16_384 + 32 * 2 * 4096 * 2)
    (att,) = _attention(d["ops"], "draft pass")
    assert att["hbm_bytes"] == 4 * per_pass == 17_314_086_912


def test_roofline_plot_prefill_is_chunked_like_the_engines():
    pytest.importorskip("matplotlib")
    from costmodel.analysis.plots import roofline_data
    # vLLM chunks prefill at 8,192 tokens: 8 · 4,000 = 32,000 tokens run as ceil(32000/8192) = 4 passes
    # of 8,000 tokens, each reading the FFN weights (3 · 4096 · 11008 fp16) once:
    # intensity = 2 · 8000 · W / (2 · W + 8000 · (4096 + 4096) · 2) FLOP/B per chunk
    W = 3 * 4096 * 11008
    d = roofline_data(dict(model="llama-2-7b-32k", hardware="a100-80gb", batch_size=8, prompt_len=4000, runtime="vllm"))
    (ffn,) = [o for o in d["ops"] if o["phase"] == "prefill" and o["name"] == "ffn"]
    assert ffn["intensity"] == pytest.approx(2 * 8000 * W / (2 * W + 8000 * 8192 * 2), rel=1e-12)
    assert d["phase_time_s"]["prefill"] == evaluate(dict(model="llama-2-7b-32k", hardware="a100-80gb", batch_size=8,
                                                         prompt_len=4000, runtime="vllm"))["ttft_s"]


def test_roofline_plot_ar_step_of_shared_prefix_is_the_baselines():
    pytest.importorskip("matplotlib")
    from costmodel.analysis.plots import roofline_data
    f = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=4, prompt_len=2000, gen_len=128,
             strategy="shared_prefix", n_branches=8)
    d = roofline_data(f)
    # the baseline decodes 4 · 8 = 32 independent sequences, each over 2000 + 64 tokens of context
    (att,) = _attention(d["ops"], "AR decode step")
    assert att["hbm_bytes"] == 32 * (32 * 2064 * 16_384 + 32 * 16_384 + 32 * 2 * 4096 * 2)
    assert "shared-prefix decode step" in d["phase_time_s"]


def test_recommend_reason_reads_the_gemm_intensity_of_the_engines_ar_step():
    from costmodel.analysis.recommend import pass_shares, recommend
    f = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=256, prompt_len=16, gen_len=16)
    # weight GEMMs of one decode step of 256 tokens (fp16): per layer qkv 3·4096², o 4096², FFN 3·4096·11008
    # parameters; activations in and out (4096 + 12288) + (4096 + 4096) + (4096 + 4096) elements per token;
    # the LM head 32000·4096 parameters, 4096 elements in and 32000 fp32 logits out per token
    layer = 3 * 4096 ** 2 + 4096 ** 2 + 3 * 4096 * 11008
    params = 32 * layer + 32000 * 4096
    act_per_token = 32 * 32768 * 2 + 4096 * 2 + 32000 * 4
    intensity = 2 * 256 * params / (2 * params + 256 * act_per_token)       # = 245.4 FLOP/B
    ar = evaluate_passes(dict(f, strategy="autoregressive"))["decode"].cost
    assert pass_shares(ar)["gemm_intensity"] == pytest.approx(intensity, rel=1e-12)
    assert f"about {intensity:.0f} FLOP/B" in recommend(f)["reason"]


def test_recommend_reason_splits_the_step_bytes_by_the_engines_operators():
    from costmodel.analysis.recommend import pass_shares
    f = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=256, prompt_len=256, strategy="autoregressive")
    p = evaluate_passes(f)["decode"].cost
    s = pass_shares(p)
    # attention of one decode step: 256 sequences read 256 + 64 tokens of KV, write one entry, and move
    # q and o (2 · 4096 · 2 B) per layer, over 32 layers
    att = 32 * (256 * 320 * 16_384 + 256 * 16_384 + 256 * 2 * 4096 * 2)
    assert s["attention"] == pytest.approx(att / float(p.hbm_bytes), rel=1e-12)
    assert 0.0 < s["weight_gemms"] < 1.0 - s["attention"]


def test_claim_floors_use_the_engines_weights_and_kv():
    from costmodel.analysis.claims_model import hard_limits
    from costmodel.engine import memory
    from costmodel.engine.evaluate import build_exec
    from costmodel.inputs.record import parse_record
    f = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=1000, gen_len=128)
    rec = parse_record(f)
    lim = hard_limits(rec, evaluate(f))
    # one token multiplies through 32·(4·4096² + 3·4096·11008) + 32000·4096 = 6,607,077,376 fp16 weights
    # and reads 1000 tokens of KV at 524,288 B each, at the A100's 2.039 TB/s datasheet bandwidth
    w_read = 6_607_077_376 * 2
    assert memory.active_weights_bytes_device(build_exec(rec)) == w_read
    assert lim.t_floor == pytest.approx((w_read + 1000 * 524_288) / 2.039e12, rel=1e-15)
    # resident: the weights on the device (the engine's figure) and the prompt's KV
    assert lim.mem_floor == evaluate(f)["memory_target_weights_bytes"] + 1000 * 524_288


def test_calibration_diagnosis_quotes_the_engines_weights():
    from costmodel.calibration.report import diagnose
    from costmodel.calibration.validate import load_measurements
    ms = {m.id: m for m in load_measurements()}
    # Llama-3-8B under TRT-LLM's int4 layout on the Orin: the engine's weights, not a typed-in figure
    orin = ms["VP193"]
    text = diagnose({"rel_error": -0.3}, orin)
    r = evaluate(orin.record)
    assert f"fp16 LM head's {128_256 * 4096 * 2 / 1e9:.2f} GB" in text       # 128,256 × 4,096 fp16 weights
    assert f"{r['weights_bytes'] / 1e9:.2f}" in diagnose({"rel_error": 0.1}, ms["VP199"])
    # Llama-2-7B fp16 on a T4: 6.74 G parameters · 2 B
    assert "13.5 GB fp16 weights" in diagnose({"predicted": True, "rel_error": None}, ms["VP243"])
