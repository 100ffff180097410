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


# --------------------------------------------------------------------------- a windowed MoE unit model
# tests/data/unit-model.yaml made 4 layers, all MoE: 4 routed experts of moe_d_ff 32, top-2, 1 shared
# expert; windowed attention (window 64) in 2 of the 4 layers (every 2nd layer global). K and V of one
# token in one layer with tp = 1: 2 · 2 KV heads · 16 · 2 B = 128 B.
def _moe_windowed(tmp_path, **kw):
    d = os.path.join(os.path.dirname(__file__), "data")
    model = tmp_path / "unit-moe-windowed.yaml"
    if not model.exists():
        model.write_text(open(f"{d}/unit-model.yaml").read().replace("id: unit-model", "id: unit-moe-windowed")
                         .replace("n_layers: 2", "n_layers: 4").replace("n_experts: 1", "n_experts: 4")
                         .replace("experts_per_token: 1", "experts_per_token: 2")
                         + "moe:\n  moe_d_ff: 32\n  n_shared_experts: 1\n"
                         + "attention:\n  window: 64\n  global_layer_every: 2\n")
    rt = tmp_path / "unit-rt-int8-scales.yaml"      # per-channel int8 with 2 B of scale per input row
    if not rt.exists():
        rt.write_text(open(f"{d}/unit-rt.yaml").read() + "int8_scale_bytes_per_group: {value: 2.0, source: test}\n")
    rec = dict(model=str(model), hardware=f"{d}/unit-hw.yaml", runtime=str(rt), batch_size=2, prompt_len=100,
               gen_len=20)
    return build_exec(parse_record(dict(rec, **kw)))


def test_windowed_kv_by_hand_under_pp_and_attention_data_parallel(tmp_path):
    one = _moe_windowed(tmp_path)
    assert (one.model.n_global_layers, one.model.n_window_layers) == (2, 2)
    # 240 tokens of 2 sequences: the 2 windowed layers keep min(240, 2 · 64) = 128 of them
    assert memory.kv_bytes(one, 240.0, seqs=2.0) == 128 * (2 * 240 + 2 * 128) == 94_208
    # no sequence count: every layer priced at all 240 tokens
    assert memory.kv_bytes(one, 240.0) == 128 * 4 * 240 == 122_880
    # pp = 2: each stage holds 2 of the 4 layers (one global, one windowed)
    pp = _moe_windowed(tmp_path, n_devices=2, pipeline_parallel=2)
    assert memory.kv_bytes(pp, 240.0, seqs=2.0) == 128 * (240 + 128) == 47_104
    assert memory.kv_bytes(pp, 240.0) == 128 * 2 * 240 == 61_440
    # attention data parallel (tp 1, ep 2: dp = 2): each group keeps its 1 sequence, 120 tokens;
    # its windowed layers min(120, 1 · 64) = 64
    dp = _moe_windowed(tmp_path, n_devices=2, tensor_parallel=1, expert_parallel=2)
    assert (dp.tp, dp.dp, dp.ep) == (1, 2, 2)
    assert memory.kv_bytes(dp, 240.0, seqs=2.0) == 128 * (2 * 120 + 2 * 64) == 47_104
    assert memory.kv_bytes(dp, 240.0) == 128 * 4 * 120 == 61_440


def test_draft_breakdown_parts_and_totals_by_hand(tmp_path):
    # nothing given: a draft that holds nothing
    none = memory.draft_breakdown()
    assert {k: float(v) for k, v in none.device.items()} == {"draft_weights": 0.0, "draft_kv": 0.0}
    assert (float(none.weights_total_bytes), float(none.kv_total_bytes)) == (0.0, 0.0)
    pp = _moe_windowed(tmp_path, n_devices=2, pipeline_parallel=2)
    assert float(memory.draft_breakdown(kv_ex=pp).device["draft_kv"]) == 0.0      # no KV tokens given
    # a windowed draft on tp·pp = 1·2 devices: per device 128 · (240 + min(240, 2 · 64)) = 47,104 B,
    # over its 2 devices twice that; weights 5 B per device, 20 B in all when the total is given
    parts = memory.draft_breakdown(5.0, pp, 240.0, seqs=2.0, weights_total=20.0)
    assert float(parts.device["draft_kv"]) == 47_104 and float(parts.device["draft_weights"]) == 5.0
    assert float(parts.kv_total_bytes) == 2 * 47_104
    assert float(parts.weights_total_bytes) == 20.0


def test_moe_activations_by_hand_with_attention_data_parallel(tmp_path):
    # all layers MoE, each token runs its 2 routed + 1 shared experts of width 32: FFN width 96
    # per token 2·64 + (64 + 2·32)/1 + 64/1 + 3·96/1 = 608 elements · 2 B = 1,216 B; logits 1000 · 4 B
    one = _moe_windowed(tmp_path)
    assert memory.activation_bytes(one, 200.0, 2.0) == 200 * 1_216 + 2 * 4_000 == 251_200
    # dp = 2: the device runs its group's half of the pass, 100 tokens and 1 logit row
    dp = _moe_windowed(tmp_path, n_devices=2, tensor_parallel=1, expert_parallel=2)
    assert memory.activation_bytes(dp, 200.0, 2.0) == 100 * 1_216 + 1 * 4_000 == 125_600


def test_expert_parallel_weights_and_quantised_routed_experts_by_hand(tmp_path):
    # int8, per-channel scales of 2 B: a matrix with input dimension d_in costs 1 + 2/d_in B per weight.
    # One expert (d 64, width 32): gate and up at d_in 64, 2·64·32·(1 + 2/64) = 4,224 B; down at d_in 32,
    # 64·32·(1 + 2/32) = 2,176 B: 6,400 B; 4 MoE layers · 4 routed experts
    ep = _moe_windowed(tmp_path, n_devices=2, tensor_parallel=1, expert_parallel=2, weight_dtype="int8")
    assert memory.routed_expert_bytes(ep) == pytest.approx(4 * 4 * (4_224 + 2_176), rel=1e-15)
    # fp16, ep = 2: each device keeps half the routed experts (4 · 4 · 3·64·32 parameters · 2 B), all the rest
    ep = _moe_windowed(tmp_path, n_devices=2, tensor_parallel=1, expert_parallel=2)
    routed = 4 * 4 * 3 * 64 * 32 * 2
    assert memory.routed_expert_bytes(ep) == routed == 196_608
    assert memory.weights_device_bytes(ep) == pytest.approx(memory.weights_total_bytes(ep) - routed / 2, rel=1e-15)


def test_mla_down_projections_on_every_tp_rank_by_hand():
    # DeepSeek-V3 on 8 ranks: the down-projections d × (q_lora 1536 + kv_lora 512 + rope 64) of each of
    # 61 layers are kept on every rank: 7 extra copies, bf16
    ex = build_exec(parse_record(dict(BASE, model="deepseek-v3", hardware="h200", n_devices=8, weight_dtype="bf16")))
    extra = 7 * 7168 * (1536 + 512 + 64) * 61
    assert memory.weights_device_bytes(ex) == pytest.approx((memory.weights_total_bytes(ex) + extra * 2) / 8,
                                                            rel=1e-15)


def _unfused_chunked(tmp_path, chunk):
    d = os.path.join(os.path.dirname(__file__), "data")
    p = tmp_path / f"unit-rt-unfused-chunk{chunk}.yaml"
    p.write_text(open(f"{d}/unit-rt.yaml").read().replace("fused_attention: true", "fused_attention: false")
                 .replace("memory_overhead_bytes: {value: 0.0", "memory_overhead_bytes: {value: 1.0e+09")
                 + f"prefill_chunk_tokens: {{value: {chunk}, source: test}}\n")
    return dict(model=f"{d}/unit-model.yaml", hardware=f"{d}/unit-hw.yaml", runtime=str(p))


def test_chunked_prefill_caps_activations_and_scores_by_hand(tmp_path):
    # unit model, unfused kernel, chunks of 64: B = 2 prompts of 100 prefill as 200 tokens, cut to a
    # 64-token pass holding 64/200 of the 2 · 100² score pairs = 6,400 (the decode pass: 2 · 111)
    r = evaluate(dict(_unfused_chunked(tmp_path, 64), batch_size=2, prompt_len=100, gen_len=20))
    assert r["memory_attention_scores_bytes"] == pytest.approx(4 * 4 * 6_400, rel=1e-15)
    # activations of 64 tokens: 2·64 + (64 + 64)/1 + 64 + 3·128 = 704 elements · 2 B; logits of the 2 last
    assert r["memory_activations_bytes"] == 64 * 704 * 2 + 2 * 1000 * 4 == 98_112
    assert r["memory_runtime_overhead_bytes"] == 1e9       # the runtime's 1 GB, a part of its own
    # a prompt shorter than the chunk is not scaled: 1 × 10 tokens, 10² pairs
    r = evaluate(dict(_unfused_chunked(tmp_path, 64), batch_size=1, prompt_len=10, gen_len=20))
    assert r["memory_attention_scores_bytes"] == 4 * 4 * 100


def test_one_token_prompt_holds_one_token_of_activations(tmp_path):
    # B = 1, P = 1: the prefill and the decode passes both run 1 token with its logits:
    # 704 elements · 2 B + 1000 · 4 B = 5,408 B
    d = os.path.join(os.path.dirname(__file__), "data")
    r = evaluate(dict(model=f"{d}/unit-model.yaml", hardware=f"{d}/unit-hw.yaml", runtime=f"{d}/unit-rt.yaml",
                      batch_size=1, prompt_len=1, gen_len=20))
    assert r["memory_activations_bytes"] == 704 * 2 + 1000 * 4 == 5_408


def test_quantised_weights_of_a_mixed_plain_tied_moe_model_by_hand(tmp_path):
    # unit model made 4 layers, plain FFN, tied embeddings; MoE after 1 dense layer: 4 routed experts
    # (top-2) + 1 shared of width 32. int8 with 2 B of scale per input row: 1 + 2/d_in B per weight,
    # w(64) = 1.03125, w(32) = 1.0625, w(128) = 1.015625; norms in fp16 (2 B)
    d = os.path.join(os.path.dirname(__file__), "data")
    model = tmp_path / "unit-mixed.yaml"
    model.write_text(open(f"{d}/unit-model.yaml").read().replace("id: unit-model", "id: unit-mixed")
                     .replace("n_layers: 2", "n_layers: 4").replace("n_experts: 1", "n_experts: 4")
                     .replace("experts_per_token: 1", "experts_per_token: 2").replace("ffn_type: gated", "ffn_type: plain")
                     .replace("tied_embeddings: false", "tied_embeddings: true")
                     + "moe:\n  moe_d_ff: 32\n  n_shared_experts: 1\n  first_dense_layers: 1\n")
    rt = tmp_path / "unit-rt-int8-scales.yaml"
    rt.write_text(open(f"{d}/unit-rt.yaml").read() + "int8_scale_bytes_per_group: {value: 2.0, source: test}\n")
    ex = build_exec(parse_record(dict(model=str(model), hardware=f"{d}/unit-hw.yaml", runtime=str(rt),
                                      batch_size=1, prompt_len=10, gen_len=10, weight_dtype="int8")))
    assert (ex.model.n_dense_layers, ex.model.n_moe_layers) == (1, 3)
    # attention: q, k, v 64·(64 + 2·32) = 8,192 and o 64·64 = 4,096 weights at d_in 64; norms 2·64
    attn = (8_192 + 4_096) * 1.03125 + 128 * 2
    # dense layer, plain FFN of 128: up 64·128 at d_in 64, down 128·64 at d_in 128
    dense = attn + 8_192 * 1.03125 + 8_192 * 1.015625
    # MoE layer: router 64·4 at d_in 64; 5 experts of up 64·32 (d_in 64) and down 32·64 (d_in 32)
    moe = attn + 256 * 1.03125 + 5 * 2_048 * 1.03125 + 5 * 2_048 * 1.0625
    # tied embedding 1000·64 in the LM head's format (the body's, at d_in 64), no separate head; final norm
    total = dense + 3 * moe + 64_000 * 1.03125 + 64 * 2
    assert (dense, moe, total) == (29_696, 34_632, 199_720)
    assert memory.weights_total_bytes(ex) == pytest.approx(total, rel=1e-15)
