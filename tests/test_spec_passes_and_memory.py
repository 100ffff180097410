"""A speculative step's named passes and its memory, by hand on the unit device.

unit-model: 2 layers, d 64, 4 heads, 2 KV heads of 16, d_ff 128 (gated), vocab 1000, fp16;
unit-draft: 1 layer, d 32, 2 heads, 1 KV head of 16, d_ff 64, vocab 1000.
"""

import importlib
import os

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import _execs, evaluate_passes, make_ctx
from costmodel.inputs.record import parse_record
from handcalc import DRAFT, UNIT, pass_s

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20, strategy="speculative", gamma=3, acceptance_rate=0.5)
DRAFT_MODEL = f"{D}/unit-draft.yaml"
spec = importlib.import_module("costmodel.engine.strategies.speculative")   # the module, not its function


# --------------------------------------------------------------------------- named passes
def test_a_draft_models_passes_by_name_and_device():
    p = evaluate_passes(dict(BASE, draft_model=DRAFT_MODEL))
    assert [k for k in p if k != "ar_decode"] == ["prefill", "draft_prefill", "draft", "verify"]
    # the prompts (2 × 100 tokens) through the target, then through the draft (its own KV)
    assert float(p["prefill"].cost.time_s) == pytest.approx(pass_s(UNIT, 200, 10_100, 200, lm=2), rel=1e-12)
    assert float(p["draft_prefill"].cost.time_s) == pytest.approx(pass_s(DRAFT, 200, 10_100, 200, lm=2), rel=1e-12)
    assert [p[k].ex.model.id for k in ("prefill", "draft_prefill", "draft", "verify")] == \
        ["unit-model", "unit-draft", "unit-draft", "unit-model"]


def _runtime(tmp_path, name: str, extra: str) -> str:
    p = tmp_path / f"{name}.yaml"
    p.write_text(open(f"{D}/unit-rt.yaml").read() + extra)
    return str(p)


def test_a_draft_prefills_as_the_runtime_prefills_the_target(tmp_path):
    # one prompt per pass: the 2 prompts of 100 are 2 passes of 100 tokens (5050 pairs, 1 logit row)
    # through the target, and 2 such passes through the draft, not one pass of 200 tokens
    rt = _runtime(tmp_path, "per-prompt", "prefill_per_sequence: {value: true, source: test}\n")
    p = evaluate_passes(dict(BASE, draft_model=DRAFT_MODEL, runtime=rt))
    assert float(p["prefill"].cost.time_s) == pytest.approx(2 * pass_s(UNIT, 100, 5050, 100, lm=1), rel=1e-12)
    assert float(p["draft_prefill"].cost.time_s) == pytest.approx(2 * pass_s(DRAFT, 100, 5050, 100, lm=1), rel=1e-12)
    # chunks of 64 tokens: the 200 prompt tokens as ceil(200/64) = 4 passes of 50 (a quarter of the
    # 10,100 pairs and of the 2 logit rows each), for the draft as for the target
    rt = _runtime(tmp_path, "chunked", "prefill_chunk_tokens: {value: 64, source: test}\n")
    p = evaluate_passes(dict(BASE, draft_model=DRAFT_MODEL, runtime=rt))
    assert float(p["draft_prefill"].cost.time_s) == pytest.approx(4 * pass_s(DRAFT, 50, 2525, 50, lm=0.5), rel=1e-12)


def test_a_draft_prefill_is_part_of_the_targets_prefill_step(tmp_path):
    # a step overhead of 1 ms is charged once for the prompt: TTFT = target passes + 1 ms + draft passes
    rt = tmp_path / "overhead.yaml"
    rt.write_text(open(f"{D}/unit-rt.yaml").read().replace("step_overhead_s: {value: 0.0, source: test}",
                                                           "step_overhead_s: {value: 0.001, source: test}"))
    rt = str(rt)
    r = evaluate(dict(BASE, draft_model=DRAFT_MODEL, runtime=rt))
    want = pass_s(UNIT, 200, 10_100, 200, lm=2) + 1e-3 + pass_s(DRAFT, 200, 10_100, 200, lm=2)
    assert r["ttft_s"] == pytest.approx(want, rel=1e-12)


def test_self_and_ngram_drafts_have_no_draft_prefill():
    p = evaluate_passes(dict(BASE, draft_model="self"))
    assert [k for k in p if k != "ar_decode"] == ["prefill", "draft", "verify"]
    assert p["draft"].ex.model.id == "unit-model"
    p = evaluate_passes(dict(BASE, draft_model="none"))
    assert [k for k in p if k != "ar_decode"] == ["prefill", "verify"]


def test_an_eagle3_head_runs_its_embedding_projection_every_pass_and_its_fc_once():
    # B = 2, γ = 3: each pass projects the 2 new tokens' embeddings d × (q + 2·kv) = 64 × 128
    # (2·64·128·2 FLOPs per pass); the 3d × d fc fuses the target's features on the first pass only
    rows = evaluate_passes(dict(BASE, draft_model="eagle3"))["draft"].cost.ops
    flops = {name: sum(float(r[1]) for r in rows if r[0] == name) for name in ("eagle3_embed_qkv", "eagle3_fc")}
    assert flops == {"eagle3_embed_qkv": 3 * 2 * 64 * 128 * 2, "eagle3_fc": 2 * 192 * 64 * 2}


def test_an_eagle_chain_fuses_feature_and_embedding_on_every_pass():
    # B = 2, γ = 3: each of the 3 head passes runs the 2d × d = 128 × 64 fusion FC over its 2 tokens
    # (2·8192·2 FLOPs per pass), as a tree's EAGLE passes do (SafeAILab/EAGLE cnets.py: fc in every forward)
    rows = evaluate_passes(dict(BASE, draft_model="eagle"))["draft"].cost.ops
    assert sum(float(r[1]) for r in rows if r[0] == "eagle_fuse") == 3 * 2 * 8192 * 2


# --------------------------------------------------------------------------- draft memory
def test_an_eagle_heads_weights_and_kv_on_the_targets_device():
    # one decoder layer of the target's width: attention 64·128 + 64·64 = 12,288, gated FFN
    # 3·64·128 = 24,576, two norms 2·64, the 2d × d fusion 2·64² = 8,192: 45,184 parameters · 2 B;
    # KV of its one layer (2·2·16·2 = 128 B per token) for B·(L_peak + γ) = 2·(120 + 3) tokens
    r = evaluate(dict(BASE, draft_model="eagle"))
    assert r["memory_draft_weights_bytes"] == 45_184 * 2
    assert r["memory_draft_kv_bytes"] == 2 * 123 * 128


def test_an_eagle3_heads_weights_with_its_own_vocabulary_per_device_and_in_total():
    # attention 12,288 + embedding half of q/k/v 64·128 = 8,192 + FFN 24,576 + fc 3·64² = 12,288
    # + LM head over V_d = 500 tokens 500·64 = 32,000 + four norms 4·64: 89,600 parameters
    kw = dict(BASE, draft_model="eagle3", draft_vocab_size=500)
    assert evaluate(kw)["memory_draft_weights_bytes"] == 89_600 * 2
    # tp = 2: all but the fc split over the two devices, the fc on both
    two = dict(kw, n_devices=2)
    assert evaluate(two)["memory_draft_weights_bytes"] == ((89_600 - 12_288) / 2 + 12_288) * 2
    ar = evaluate(dict(two, strategy="autoregressive", draft_model=None, gamma=None, acceptance_rate=None,
                       draft_vocab_size=None))
    assert evaluate(two)["weights_bytes"] - ar["weights_bytes"] == (89_600 - 12_288 + 2 * 12_288) * 2


def test_an_eagle_head_in_total_over_tensor_parallel_devices():
    kw = dict(BASE, draft_model="eagle", n_devices=2)
    ar = evaluate(dict(kw, strategy="autoregressive", draft_model=None, gamma=None, acceptance_rate=None))
    r = evaluate(kw)
    assert r["memory_draft_weights_bytes"] == 45_184 * 2 / 2
    assert r["weights_bytes"] - ar["weights_bytes"] == 45_184 * 2


def test_verification_activations_bind_when_the_prompt_is_short():
    # P = 1: the prefill holds 2 tokens; the verification 2·(γ + 1) = 16 tokens with logits:
    # 16 · (2·64 + 128 + 64 + 3·128) · 2 B + 16 · 1000 · 4 B (fp32 logits)
    r = evaluate(dict(BASE, draft_model="none", gamma=7, prompt_len=1))
    assert r["memory_activations_bytes"] == 16 * 704 * 2 + 16 * 1000 * 4


def test_verification_scores_of_an_unfused_kernel(tmp_path):
    # unfused attention stores 4 B · heads per (query, key) pair: the verification's 2·8 queries over
    # L + γ + 1 = (1 + 20/2) + 8 = 19 keys each; the prefill's 2·1² pairs are fewer
    rt = open(f"{D}/unit-rt.yaml").read().replace("fused_attention: true", "fused_attention: false")
    p = tmp_path / "unfused.yaml"
    p.write_text(rt)
    r = evaluate(dict(BASE, runtime=str(p), draft_model="none", gamma=7, prompt_len=1))
    assert r["memory_attention_scores_bytes"] == 4 * 4 * 2 * 8 * 19


def test_a_separate_draft_device_holds_the_drafts_activations():
    # the unit draft's decode pass of B = 2 tokens: 2 · ((2·32 + 64 + 32 + 3·64) · 2 B + 1000 · 4 B)
    rec = parse_record(dict(BASE, draft_model=DRAFT_MODEL, draft_placement="separate_device"))
    ex, draft = _execs(rec)
    fp = spec.speculative(make_ctx(rec, ex), draft).memory
    assert float(fp.other_device["activations"]) == 2 * (352 * 2 + 4000)
    assert "draft_weights" not in fp.device


def _windowed(tmp_path, name):
    """The unit model or draft with every layer attending over a sliding window of 16 tokens."""
    p = tmp_path / f"{name}-w16.yaml"
    p.write_text(open(f"{D}/{name}.yaml").read().replace(f"id: {name}", f"id: {name}-w16")
                 + "\nattention: {window: 16}\n")
    return str(p)


def test_windowed_layers_cap_the_kv_of_every_holder_at_seqs_times_window(tmp_path):
    # a sliding window of 16 keeps at most B·16 = 32 tokens' KV per windowed layer, whoever holds it
    r = evaluate(dict(BASE, draft_model=_windowed(tmp_path, "unit-draft")))
    # the draft's 2·(120 + 3) tokens capped at 32, 64 B each (1 layer, 1 KV head of 16, fp16)
    assert r["memory_draft_kv_bytes"] == 32 * 64
    # a windowed target drafting for itself: its own 2·(120 + 3 + 1) slots and the draft's 2·(120 + 3),
    # both capped at 32 tokens of 256 B
    r = evaluate(dict(BASE, model=_windowed(tmp_path, "unit-model"), draft_model="self"))
    assert r["memory_target_kv_bytes"] == 32 * 256
    assert r["memory_draft_kv_bytes"] == 32 * 256


def test_windowed_heads_and_mtp_modules_hold_their_kv_capped_too(tmp_path):
    # a target whose every layer has a 16-token window: its EAGLE head (one such layer, 2 KV heads of 16,
    # 128 B per token) and its MTP module (one such layer) keep at most B·16 = 32 of their 2·(120 + 3) tokens
    windowed = _windowed(tmp_path, "unit-model")
    assert evaluate(dict(BASE, model=windowed, draft_model="eagle"))["memory_draft_kv_bytes"] == 32 * 128
    p = tmp_path / "unit-model-w16-mtp.yaml"
    p.write_text(open(windowed).read() + "mtp_layers: 1\n")
    assert evaluate(dict(BASE, model=str(p), draft_model="mtp"))["memory_draft_kv_bytes"] == 32 * 128
