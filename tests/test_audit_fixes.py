"""Memory, tree-draft and GQA fixes, each checked against numbers worked out by hand.

Llama-2-7B: 32 layers, d_model 4096, 32 heads of 128 (no GQA), d_ff 11008, vocab 32000; fp16 KV of
one token in one layer: 2 · 32 · 128 · 2 B = 16,384 B. Llama-3.1-8B: 32 layers, d_model 4096, 32 query
heads and 8 KV heads of 128, d_ff 14336, vocab 128256.
"""

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import _outcome, build_exec
from costmodel.engine.strategies.tree import draft_pass_tokens
from costmodel.engine.tree import validate_parents
from costmodel.errors import InputError
from costmodel.inputs.record import parse_record

BASE = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=2, prompt_len=1000, gen_len=24)
EAGLE_HEAD_PARAMS = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096 + 2 * 4096 * 4096   # layer + norms + fuse FC


def test_long_context_batch_fits_when_prompts_prefill_one_at_a_time():
    # MagicDec's configuration: Llama-3.1-8B, 8 x H100, batch 64 at 32K. Activations per token on one of
    # tp = 8 devices: 2·4096 + (4096 + 2·1024)/8 + 4096/8 + 3·14336/8 = 14,848 elements · 2 B = 29,696 B.
    rec = dict(model="llama-3.1-8b", hardware="h100-sxm", n_devices=8, batch_size=64, prompt_len=32000,
               gen_len=128)
    r = evaluate(dict(rec, runtime="compiled"))
    # one 32,000-token prompt per pass, one logits row of 128256/8 fp32 entries
    assert r["memory_activations_bytes"] == 32_000 * 29_696 + 128_256 / 8 * 4 == 950_336_128
    assert r["fits"]
    # HF generate prefills the 64 prompts in one pass of 2,048,000 tokens: 60.8 GB of activations alone
    e = evaluate(dict(rec, runtime="eager"))
    assert e["memory_activations_bytes"] == 64 * 32_000 * 29_696 + 64 * 128_256 / 8 * 4
    assert not e["fits"]


def test_per_sequence_prefill_runs_one_pass_per_prompt():
    # batch 4 of 1000 tokens: four 1000-token passes take four times one 1000-token pass (same work)
    one = evaluate(dict(BASE, batch_size=1, runtime="compiled"))
    four = evaluate(dict(BASE, batch_size=4, runtime="compiled"))
    step = 5.4154e-04          # compiled's step overhead, charged once per prefill
    assert four["ttft_s"] - step == pytest.approx(4 * (one["ttft_s"] - step), rel=1e-12)


def test_medusa_heads_bound_the_tree_depth():
    rec = dict(BASE, strategy="tree", draft_model="medusa", acceptance_rate=0.7, tree_width=2)
    with pytest.raises(InputError, match="Medusa heads"):
        parse_record(dict(rec, tree_depth=6))                  # the checkpoints have 5 heads
    with pytest.raises(InputError, match="medusa_heads = 3"):
        parse_record(dict(rec, tree_depth=4, medusa_heads=3))
    with pytest.raises(InputError, match="Medusa heads"):
        parse_record(dict(BASE, strategy="tree", draft_model="medusa", acceptance_rate=0.7,
                          tree_parents=[0, 1, 2, 3, 4, 5]))   # a chain of depth 6
    parse_record(dict(rec, tree_depth=6, medusa_heads=6))
    # an optimal tree without a depth bound stays within the 5 heads
    r = evaluate(dict(BASE, strategy="tree", draft_model="medusa", acceptance_rate=0.9, tree_nodes=30))
    assert r["tree_depth"] <= 5


def test_medusa_heads_all_run_every_step():
    # 5 heads · (4096² + 4096·32000) = 739,246,080 parameters, 2 FLOPs each per sequence (batch 2)
    r = evaluate(dict(BASE, strategy="tree", draft_model="medusa", acceptance_rate=0.7, tree_width=2,
                      tree_depth=2), details=True)
    heads = [o for o in r["operators"] if o["name"] == "medusa_heads"]
    assert len(heads) == 1 and heads[0]["flops"] == 2 * 2 * 5 * (4096 ** 2 + 4096 * 32_000) == 2_956_984_320


def test_lockstep_applies_to_a_tree_with_given_tau():
    # a chain of 2 nodes with τ = 1.75: τ = 1 + α + α² gives α = 0.5; a lock-step batch of 2 keeps the
    # minimum: Σ_j P(length ≥ j)² = 1 + 0.5² + 0.25² = 1.3125
    rec = dict(BASE, strategy="tree", draft_model="eagle", tree_width=1, tree_depth=2, mean_accepted_tokens=1.75)
    assert evaluate(dict(rec, batch_sync="lockstep"))["tokens_per_step"] == pytest.approx(1.3125, rel=1e-9)
    assert evaluate(dict(rec, batch_sync="lockstep", batch_size=1))["tokens_per_step"] == pytest.approx(1.75, rel=1e-9)
    assert evaluate(rec)["tokens_per_step"] == 1.75


def test_tree_draft_passes_are_the_root_and_every_level_but_the_last():
    tr = validate_parents([0, 0, 1, 1, 2])           # levels of 2 and 3 nodes: depth 2
    assert list(draft_pass_tokens(tr)) == [1.0, 2.0]  # the root, then level 1 (it drafts level 2)
    r = evaluate(dict(BASE, batch_size=1, strategy="tree", draft_model="eagle", tree_parents=[0, 0, 1, 1, 2],
                      acceptance_rate=0.7), details=True)
    # the EAGLE fuse FC (2·4096 × 4096) on 1 then 2 tokens: 2·2·4096²·t FLOPs
    fuse = [o["flops"] for o in r["operators"] if o["name"] == "eagle_fuse"]
    assert fuse == [2 * 2 * 4096 ** 2 * 1, 2 * 2 * 4096 ** 2 * 2] == [67_108_864, 134_217_728]


def test_draft_memory_per_device_and_totals_under_tp():
    kw = dict(BASE, n_devices=2, strategy="tree", tree_width=2, tree_depth=2, acceptance_rate=0.7)
    plain = evaluate(dict(BASE, n_devices=2))
    m = evaluate(dict(kw, draft_model="medusa"))
    heads = 5 * (4096 ** 2 + 4096 * 32_000) * 2                      # bytes of the 5 fp16 heads
    assert m["memory_draft_weights_bytes"] == heads / 2                # split over tp = 2
    assert m["weights_bytes"] == plain["weights_bytes"] + heads        # counted whole in the total
    e = evaluate(dict(kw, draft_model="eagle"))
    assert e["memory_draft_weights_bytes"] == EAGLE_HEAD_PARAMS * 2 / 2
    assert e["weights_bytes"] == plain["weights_bytes"] + EAGLE_HEAD_PARAMS * 2
    # the head's one layer keeps 16 of its 32 KV heads per device: 2·16·128·2 = 8,192 B per token,
    # for 2 sequences · 1,024 tokens; the KV total counts both devices' halves
    assert e["memory_draft_kv_bytes"] == 2 * 1024 * 8192
    tree_kv = (2 * 1024 + 2 * 7) * 2 * 32 * 16 * 128 * 2               # target + 7 tree slots, per device
    assert e["kv_cache_bytes"] == 2 * tree_kv + 2 * (2 * 1024 * 8192)


def test_eagle_head_is_whole_on_one_pipeline_stage():
    # pp = 2: the head's single layer is not halved: 2 · 1,024 tokens · 16,384 B
    e = evaluate(dict(BASE, n_devices=2, pipeline_parallel=2, strategy="tree", draft_model="eagle", tree_width=2,
                      tree_depth=2, acceptance_rate=0.7))
    assert e["memory_draft_kv_bytes"] == 2 * 1024 * 16_384


def test_separate_tree_draft_device_holds_its_activations():
    rec = parse_record(dict(BASE, strategy="tree", draft_model="llama-68m", tree_width=2, tree_depth=2,
                            acceptance_rate=0.7, draft_placement="separate_device"))
    _, out = _outcome(rec)
    # the widest draft pass runs level 1: 2 nodes · 2 sequences = 4 tokens. LLaMA-68M: d 768, 12 heads of 64
    # (q = kv = 768), d_ff 3072, vocab 32000: 4 · (2·768 + 3·768 + 768 + 3·3072) · 2 B + 4 · 32000 · 4 B
    acts = 4 * (2 * 768 + 3 * 768 + 768 + 3 * 3072) * 2 + 4 * 32_000 * 4
    assert float(out.memory.other_device["activations"]) == acts == 622_592


def test_repeat_kv_reads_and_writes_a_copy_per_query_head():
    # Llama-3.1-8B decode, batch 1 at 4,096 tokens on one A100 (L2 40 MiB). KV per token per layer:
    # 2·8·128·2 = 4,096 B; r = 32/8 = 4. One layer reads K = 4,096 tokens · 4,096 B = 16,777,216 B.
    # repeat_kv writes r·K = 67,108,864 B, then reads it back: the 40 MiB L2 holds 41,943,040 / 67,108,864
    # = 0.625 of it, so 0.375 comes from HBM: extra HBM = r·K·(1 + 0.375), L2 = r·K·0.625
    kw = dict(model="llama-3.1-8b", hardware="a100-80gb", batch_size=1, prompt_len=4096, gen_len=2)
    ex_e = build_exec(parse_record(dict(kw, runtime="eager")))
    ex_c = build_exec(parse_record(dict(kw, runtime="compiled")))
    from costmodel.engine.ops import PassShape, layer_ops
    shape = PassShape(tokens=1.0, pairs=4096.0, kv_hbm_tokens=4096.0, lm_tokens=1.0, seqs=1.0)
    a_e = next(o for o in layer_ops(shape, ex_e) if o.name == "attention")
    a_c = next(o for o in layer_ops(shape, ex_c) if o.name == "attention")
    assert ex_e.hw.l2_bytes == 41_943_040
    assert a_e.hbm_bytes - a_c.hbm_bytes == pytest.approx(67_108_864 * 1.375, rel=1e-12)
    assert a_e.l2_bytes == pytest.approx(67_108_864 * 0.625, rel=1e-12)
    # Llama-2-7B has as many KV heads as query heads: nothing to copy
    ex_l = build_exec(parse_record(dict(kw, model="llama-2-7b", runtime="eager")))
    ex_lc = build_exec(parse_record(dict(kw, model="llama-2-7b", runtime="compiled")))
    a_l = next(o for o in layer_ops(shape, ex_l) if o.name == "attention")
    a_lc = next(o for o in layer_ops(shape, ex_lc) if o.name == "attention")
    assert a_l.hbm_bytes == a_lc.hbm_bytes
