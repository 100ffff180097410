"""Memory on the most loaded device (costmodel.engine.memory), numbers worked out by hand.

Llama-2-7B: 32 layers, d_model 4096, 32 heads of 128 (no GQA), d_ff 11008, vocab 32000.
fp16 KV of one token in one layer on one device: 2 (K, V) · 32 heads · 128 · 2 B = 16,384 B.
"""

import os

import pytest

from costmodel import evaluate
from costmodel.engine import memory
from costmodel.engine.evaluate import build_exec
from costmodel.inputs.record import parse_record

BASE = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=2, prompt_len=1000, gen_len=24)


def ex_of(**kw):
    return build_exec(parse_record(dict(BASE, **kw)))


def test_kv_per_token_per_device_under_tp_and_pp():
    # tp = 2 halves the heads, pp = 2 halves the layers: 2 · 16 layers · 16 heads · 128 · 2 B
    assert memory.kv_bytes_per_token_device(ex_of(n_devices=4, tensor_parallel=2, pipeline_parallel=2)) \
        == 2 * 16 * 16 * 128 * 2 == 131_072
    # Llama-2-70B has 8 KV heads: on 16 devices each keeps ceil(8/16) = 1, replicated (80 layers)
    ex = build_exec(parse_record(dict(BASE, model="llama-2-70b", n_devices=16)))
    assert memory.kv_bytes_per_token_device(ex) == 2 * 80 * 1 * 128 * 2 == 40_960


def test_replicated_kv_projections_add_to_weights_per_device():
    ex = build_exec(parse_record(dict(BASE, model="llama-2-70b", n_devices=16)))
    # (1 head · 16 devices − 8 heads) · 128 · 8192 · 2 (K and V) · 80 layers extra fp16 parameters
    extra = (1 * 16 - 8) * 128 * 8192 * 2 * 80
    assert memory.weights_device_bytes(ex) == pytest.approx((memory.weights_total_bytes(ex) + extra * 2) / 16,
                                                            rel=1e-15)


def test_autoregressive_breakdown_under_tp_and_pp():
    # eager (HF generate) prefills the whole batch in one pass
    r = evaluate(dict(BASE, n_devices=4, tensor_parallel=2, pipeline_parallel=2, runtime="eager"))
    # KV: 2 sequences · (1000 + 24) tokens · 131,072 B on each device; the cache is 4 devices' worth
    assert r["memory_target_kv_bytes"] == 2 * 1024 * 131_072 == 268_435_456
    assert r["kv_cache_bytes"] == 4 * 268_435_456
    # largest pass = the 2,000-token prefill: per token 2·4096 + (4096 + 2·4096)/2 + 4096/2 + 3·11008/2
    # = 32,896 elements · 2 B, plus fp32 logits of the 2 last tokens over 32000/2 vocabulary entries
    assert r["memory_activations_bytes"] == 2000 * 32_896 * 2 + 2 * 16_000 * 4 == 131_712_000
    parts = sum(v for k, v in r.items() if k.startswith("memory_") and k.endswith("_bytes"))
    assert r["peak_device_memory_bytes"] == parts


def test_speculative_kv_slots_and_draft_kv():
    r = evaluate(dict(BASE, strategy="speculative", draft_model="llama-68m", gamma=4, acceptance_rate=0.7))
    # the target stores γ + 1 = 5 speculative slots per sequence beyond the 1,024 tokens of context
    assert r["memory_target_kv_bytes"] == 2 * (1024 + 5) * 32 * 16_384
    # LLaMA-68M: 2 layers · 12 heads · 64 · 2 (K, V) · 2 B = 6,144 B per token, context + γ tokens
    assert r["memory_draft_kv_bytes"] == 2 * (1024 + 4) * 6_144


def test_self_draft_kv_is_capped_by_its_budget():
    r = evaluate(dict(BASE, strategy="speculative", draft_model="self", draft_kv_budget=256, gamma=3,
                      acceptance_rate=0.8))
    # the target's own layers keep min(1,024, 256) + γ = 259 tokens per sequence for drafting
    assert r["memory_draft_kv_bytes"] == 2 * 259 * 32 * 16_384
    assert r["memory_draft_weights_bytes"] == 0.0


def test_tree_scratch_and_medusa_heads():
    r = evaluate(dict(BASE, strategy="tree", draft_model="medusa", tree_width=2, tree_depth=2, acceptance_rate=0.7))
    # 2 + 4 = 6 nodes + the root: 7 KV slots per sequence
    assert r["memory_tree_scratch_bytes"] == 2 * 7 * 32 * 16_384 == 7_340_032
    # the checkpoint's 5 heads (not one per level), each a 4096×4096 ResBlock and a 4096×32000 head, fp16
    assert r["memory_draft_weights_bytes"] == 5 * (4096 * 4096 + 4096 * 32_000) * 2 == 1_478_492_160
    r3 = evaluate(dict(BASE, strategy="tree", draft_model="medusa", medusa_heads=3, tree_width=2, tree_depth=2,
                       acceptance_rate=0.7))
    assert r3["memory_draft_weights_bytes"] == 3 * (4096 * 4096 + 4096 * 32_000) * 2 == 887_095_296
    assert r["memory_draft_kv_bytes"] == 0.0
    assert r["kv_cache_bytes"] == r["memory_target_kv_bytes"] + 7_340_032


def test_draft_on_its_own_device_leaves_the_target_device():
    kw = dict(BASE, strategy="speculative", draft_model="llama-68m", gamma=4, acceptance_rate=0.7)
    same = evaluate(kw)
    apart = evaluate(dict(kw, draft_placement="separate_device"))
    assert "memory_draft_kv_bytes" not in apart
    assert apart["peak_device_memory_bytes"] == \
        same["peak_device_memory_bytes"] - same["memory_draft_kv_bytes"] - same["memory_draft_weights_bytes"]
    # the totals still count the draft's weights and KV
    assert apart["kv_cache_bytes"] == same["kv_cache_bytes"]
    assert apart["weights_bytes"] == same["weights_bytes"]


def test_footprint_peak_is_the_more_loaded_device():
    ex = ex_of()
    target = {"target_weights": 10.0, "target_kv": 5.0}
    draft = memory.draft_breakdown(100.0)
    assert draft.weights_total_bytes == 100.0 and draft.kv_total_bytes == 0.0
    fp = memory.footprint(ex, target, draft, separate=True)
    # the draft device also holds the runtime overhead
    assert memory.peak_device_bytes(fp.device, fp.other_device) == 100.0 + ex.rt.memory_overhead_bytes
    fp = memory.footprint(ex, target, draft)
    assert memory.peak_device_bytes(fp.device) == 115.0


def test_tree_self_draft_keeps_its_kv_on_the_target_device():
    # a self-draft is the target itself: whatever draft_placement says, its budgeted KV
    # (32 sequences · min(8,024, 256) tokens · 32 layers · 16,384 B) sits on the target's device
    # (llama-2-7b-32k: the Llama-2-7B dimensions with a 32K context, for the 8000-token prompts)
    kw = dict(BASE, model="llama-2-7b-32k", batch_size=32, prompt_len=8000, strategy="tree", draft_model="self", draft_kv_budget=256,
              tree_nodes=8, acceptance_rate=0.7)
    for placement in ("same_device", "separate_device"):
        r = evaluate(dict(kw, draft_placement=placement))
        assert r["memory_draft_kv_bytes"] == 32 * 256 * 32 * 16_384 == 4_294_967_296
        parts = sum(v for k, v in r.items() if k.startswith("memory_") and k.endswith("_bytes"))
        assert r["peak_device_memory_bytes"] == parts


# --------------------------------------------------------------------------- the unit models
# unit-model (tests/data): 2 layers, 2 KV heads of 16 → fp16 KV 2·2·16·2 = 128 B per token per layer,
# 256 B per token; 202,048 parameters (404,096 B in fp16). unit-draft: 1 layer, 1 KV head of 16 →
# 2·1·16·2 = 64 B per token; 73,312 parameters: 32·(32 + 2·16) + 32·32 + 3·32·64 + 2·32 = 9,280 in its
# layer, 1000·32 embedding, 1000·32 LM head, 32 final norm
UD = os.path.join(os.path.dirname(__file__), "data")
UNIT = dict(model=f"{UD}/unit-model.yaml", hardware=f"{UD}/unit-hw.yaml", runtime=f"{UD}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20)
UNIT_DRAFT = f"{UD}/unit-draft.yaml"


def test_speculative_draft_model_memory_by_hand():
    r = evaluate(dict(UNIT, strategy="speculative", draft_model=UNIT_DRAFT, gamma=3, acceptance_rate=0.5))
    # target: context 120 + γ + 1 = 4 speculative slots per sequence; draft: context + γ = 123
    assert r["memory_target_kv_bytes"] == 2 * 124 * 256 == 63_488
    assert r["memory_draft_kv_bytes"] == 2 * 123 * 64 == 15_744
    assert r["memory_draft_weights_bytes"] == 73_312 * 2 == 146_624
    assert r["kv_cache_bytes"] == 63_488 + 15_744
    assert r["weights_bytes"] == 404_096 + 146_624
    # the largest pass is the 200-token prefill: 200·(2·64 + (64 + 2·32) + 64 + 3·128)·2 B + 2 logits·1000·4 B
    assert r["memory_activations_bytes"] == 200 * 704 * 2 + 2 * 1000 * 4 == 289_600
    assert r["peak_device_memory_bytes"] == 404_096 + 63_488 + 289_600 + 146_624 + 15_744


def test_speculative_under_pipeline_parallel_by_hand():
    # pp = 2: each device holds one of the 2 layers, 128 B of KV per token, and half the weights; the
    # draft (one device of its own size) is not split
    r = evaluate(dict(UNIT, n_devices=2, pipeline_parallel=2, strategy="speculative", draft_model=UNIT_DRAFT,
                      gamma=3, acceptance_rate=0.5))
    assert r["memory_target_kv_bytes"] == 2 * 124 * 128 == 31_744
    assert r["memory_target_weights_bytes"] == 404_096 / 2
    assert r["memory_draft_kv_bytes"] == 2 * 123 * 64
    # the cache over all devices: both stages' target KV and the draft's
    assert r["kv_cache_bytes"] == 2 * 31_744 + 2 * 123 * 64


def test_tree_scratch_and_draft_kv_by_hand():
    # width 2, depth 2: 6 nodes + the root = 7 verified slots per sequence, 256 B each; the draft model
    # keeps KV for the 120-token context (no speculative slots: the tree's nodes are scratch)
    r = evaluate(dict(UNIT, strategy="tree", draft_model=UNIT_DRAFT, tree_width=2, tree_depth=2, acceptance_rate=0.6))
    assert r["memory_tree_scratch_bytes"] == 2 * 7 * 256 == 3_584
    assert r["memory_target_kv_bytes"] == 2 * 120 * 256 == 61_440
    assert r["memory_draft_kv_bytes"] == 2 * 120 * 64 == 15_360
    assert r["kv_cache_bytes"] == 61_440 + 3_584 + 15_360
    # under pp = 2 the scratch, like the cache, holds one layer per device: 2·7·128 B
    r2 = evaluate(dict(UNIT, n_devices=2, pipeline_parallel=2, strategy="tree", draft_model=UNIT_DRAFT,
                       tree_width=2, tree_depth=2, acceptance_rate=0.6))
    assert r2["memory_tree_scratch_bytes"] == 2 * 7 * 128
    assert r2["kv_cache_bytes"] == 2 * (2 * 120 * 128 + 2 * 7 * 128) + 15_360


def test_kv_dtype_sets_the_bytes_per_cached_token():
    # fp8: 1 B per element: 64 B per token per layer; int4: 0.5 B + fp16 scale and zero per 128
    # elements (0.53125 B); fp32: 4 B
    for kv_dtype, per_element in (("fp16", 2.0), ("fp8", 1.0), ("int8", 1.0), ("int4", 0.53125), ("fp32", 4.0)):
        r = evaluate(dict(UNIT, kv_dtype=kv_dtype))
        per_token = 2 * 2 * 2 * 16 * per_element          # layers · (K, V) · kv_heads · head_dim · bytes
        assert r["kv_bytes_per_token"] == per_token, kv_dtype
        assert r["memory_target_kv_bytes"] == 2 * 120 * per_token, kv_dtype
    # the default KV dtype is the activation dtype: fp16 for int4 weights
    assert evaluate(dict(UNIT, weight_dtype="int4"))["kv_bytes_per_token"] == 256


def test_unfused_attention_holds_the_score_block(tmp_path):
    # an unfused kernel materialises one layer's fp32 scores: 4 B · 4 heads · pairs; the prefill stores
    # the whole P × P block of each prompt (the causal half is masked, not skipped): 2·100·100 = 20,000
    # pairs, the largest block (the decode step has 2·111 = 222)
    rt = open(f"{UD}/unit-rt.yaml").read().replace("fused_attention: true", "fused_attention: false")
    p = tmp_path / "unfused.yaml"
    p.write_text(rt)
    r = evaluate(dict(UNIT, runtime=str(p)))
    assert r["memory_attention_scores_bytes"] == 4 * 4 * 20_000
    # and the prefill's scores are written and read once more: unfused ≥ fused
    assert r["ttft_s"] > evaluate(UNIT)["ttft_s"]


def _windowed_unit_model(tmp_path, window, every):
    """tests/data/unit-model.yaml with windowed attention (window ``window``, every ``every``-th layer global)."""
    d = os.path.join(os.path.dirname(__file__), "data")
    text = open(f"{d}/unit-model.yaml").read().replace("id: unit-model", "id: unit-windowed")
    p = tmp_path / f"unit-windowed-{window}.yaml"     # one file per model (specs are cached by path)
    p.write_text(text + f"attention:\n  window: {window}\n  global_layer_every: {every}\n")
    return str(p), d


def test_windowed_layers_keep_at_most_seqs_times_window_tokens_by_hand(tmp_path):
    # unit model, 2 layers, every 2nd global: 1 global + 1 windowed layer (window 64); one layer's
    # fp16 K and V of one token: 2 · 2 KV heads · 16 · 2 B = 128 B. B = 2 sequences of 100 + 20 tokens
    # store 240 tokens; the windowed layer keeps at most B · W = 2 · 64 = 128 of them
    model, d = _windowed_unit_model(tmp_path, 64, 2)
    r = evaluate(dict(model=model, hardware=f"{d}/unit-hw.yaml", runtime=f"{d}/unit-rt.yaml",
                      batch_size=2, prompt_len=100, gen_len=20))
    assert r["memory_target_kv_bytes"] == 128 * (1 * 240 + 1 * 128) == 47_104
    assert r["kv_cache_bytes"] == 47_104
    # a window wider than a sequence caps nothing: W = 200 ≥ 120 tokens per sequence
    model, d = _windowed_unit_model(tmp_path, 200, 2)
    r = evaluate(dict(model=model, hardware=f"{d}/unit-hw.yaml", runtime=f"{d}/unit-rt.yaml",
                      batch_size=2, prompt_len=100, gen_len=20))
    assert r["memory_target_kv_bytes"] == 128 * 2 * 240 == 61_440
