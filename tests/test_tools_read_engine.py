"""Tools read the passes the engine priced (evaluate_passes), never a copy of them.

Llama-2-7B fp16 on one device: 32 layers, 32 KV heads of 128, so one token's K and V in one layer
take 2 · 32 · 128 · 2 B = 16,384 B; q_dim = 4096.
"""

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import evaluate_passes

SELF_DRAFT = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=32, prompt_len=8000, strategy="speculative",
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
    d = roofline_data(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=8, prompt_len=4000, runtime="vllm"))
    (ffn,) = [o for o in d["ops"] if o["phase"] == "prefill" and o["name"] == "ffn"]
    assert ffn["intensity"] == pytest.approx(2 * 8000 * W / (2 * W + 8000 * 8192 * 2), rel=1e-12)
    assert d["phase_time_s"]["prefill"] == evaluate(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=8,
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
