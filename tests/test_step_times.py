"""Step times and time to first token of each strategy, worked out by hand on the unit device.

Every expected value is built from tests/handcalc.py (the roofline on the unit device, operator by
operator, from the model's dimensions) with the pass shapes written out here: how many tokens each
pass runs, how many (query, key) pairs its attention computes and how much context KV it reads.
unit-model: 2 layers, d 64, 4 heads, 2 KV heads of 16, d_ff 128, vocab 1000 (256 B of KV per token);
unit-draft: 1 layer, d 32, 2 heads, 1 KV head of 16, d_ff 64, vocab 1000 (64 B of KV per token).
"""

import os

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import evaluate_passes
from handcalc import DRAFT, UNIT, attention_bytes, decode_s, pass_s, prefill_s

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml")
DRAFT_MODEL = f"{D}/unit-draft.yaml"


def _attention_row(cost):
    """(FLOPs, HBM bytes) of the attention operator over all layers of a priced pass."""
    (row,) = [r for r in cost.ops if r[0] == "attention"]
    return float(row[1]), float(row[2])


# --------------------------------------------------------------------------- autoregressive
def test_ar_step_and_ttft_by_hand():
    # 2 prompts of 100 tokens, 20 generated: mean context L = 100 + 20/2 = 110
    r = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20))
    # one pass of 2 tokens, pairs 2·(110 + 1), 2·110 context tokens read
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 2, 2 * 111, 2 * 110), rel=1e-12)
    # TTFT = the prefill: 200 tokens, 2·(100·101/2) = 10,100 pairs, 200 KV tokens, logits for 2
    assert r["ttft_s"] == pytest.approx(pass_s(UNIT, 200, 10_100, 200, lm=2), rel=1e-12)
    # e2e = TTFT + (G − 1) steps; 2 sequences · 20 tokens over it
    e2e = r["ttft_s"] + 19 * r["step_latency_s"]
    assert r["e2e_latency_s"] == pytest.approx(e2e, rel=1e-12)
    assert r["tokens_per_s_e2e"] == pytest.approx(40 / e2e, rel=1e-12)
    assert r["tokens_per_s"] == pytest.approx(2 / r["step_latency_s"], rel=1e-12)


def test_chunked_prefill_ttft_by_hand(tmp_path):
    # chunks of 64 tokens: 200 prompt tokens run as ceil(200/64) = 4 passes of 50 tokens, each a
    # quarter of the pairs (2525), of the KV read (50) and of the logits (0.5), the weights read 4 times
    rt = open(f"{D}/unit-rt.yaml").read() + "prefill_chunk_tokens: {value: 64, source: test}\n"
    p = tmp_path / "chunked.yaml"
    p.write_text(rt)
    r = evaluate(dict(BASE, runtime=str(p), batch_size=2, prompt_len=100, gen_len=20))
    assert r["ttft_s"] == pytest.approx(4 * pass_s(UNIT, 50, 2525, 50, lm=0.5), rel=1e-12)


def test_step_overhead_is_added_once_per_step(tmp_path):
    rt = open(f"{D}/unit-rt.yaml").read().replace("step_overhead_s: {value: 0.0", "step_overhead_s: {value: 1.0e-03")
    p = tmp_path / "overhead.yaml"
    p.write_text(rt)
    r = evaluate(dict(BASE, runtime=str(p), batch_size=2, prompt_len=100, gen_len=20))
    assert r["step_latency_s"] == pytest.approx(1e-3 + pass_s(UNIT, 2, 222, 220), rel=1e-12)
    assert r["ttft_s"] == pytest.approx(1e-3 + pass_s(UNIT, 200, 10_100, 200, lm=2), rel=1e-12)
    assert r["time_launch_s"] == pytest.approx(1e-3, rel=1e-12)


# --------------------------------------------------------------------------- speculative
def test_speculative_step_with_a_draft_model_by_hand():
    # γ = 3 draft passes of the unit draft (2 sequences × 1 token over L = 110), then one target pass
    # verifying γ + 1 = 4 tokens per sequence: 8 tokens, pairs 2·(4·110 + 4·5/2) = 900, 220 KV read
    r = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20, strategy="speculative",
                      draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5))
    draft_pass = pass_s(DRAFT, 2, 2 * 111, 2 * 110)
    verify = pass_s(UNIT, 8, 900, 220)
    assert r["draft_time_per_step_s"] == pytest.approx(3 * draft_pass, rel=1e-12)
    assert r["verify_time_s"] == pytest.approx(verify, rel=1e-12)
    assert r["step_latency_s"] == pytest.approx(3 * draft_pass + verify, rel=1e-12)
    # τ = 1 + 0.5 + 0.25 + 0.125 = 1.875 tokens per step (Leviathan's chain)
    assert r["tokens_per_step"] == pytest.approx(1.875, rel=1e-12)
    assert r["tokens_per_s_per_seq"] == pytest.approx(1.875 / (3 * draft_pass + verify), rel=1e-12)
    # the draft model reads the prompt too: TTFT = target prefill + draft prefill
    assert r["ttft_s"] == pytest.approx(pass_s(UNIT, 200, 10_100, 200, lm=2) + pass_s(DRAFT, 200, 10_100, 200, lm=2),
                                        rel=1e-12)
    # speedup against autoregressive decoding of the same 2 sequences (one pass of 2 tokens)
    ar = pass_s(UNIT, 2, 222, 220)
    assert r["speedup_vs_ar"] == pytest.approx(1.875 / (3 * draft_pass + verify) * ar, rel=1e-12)


def test_self_draft_reads_only_its_kv_budget_by_hand():
    # draft_model=self with a 64-token KV budget: the γ = 2 draft passes are the target's own layers
    # over min(110, 64) = 64 context tokens (pairs 2·(64 + 1) = 130, 128 KV tokens read); the
    # target's prompt is the draft's, so no draft prefill
    r = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20, strategy="speculative", draft_model="self",
                      draft_kv_budget=64, gamma=2, acceptance_rate=0.8))
    draft_pass = pass_s(UNIT, 2, 130, 128)
    verify = pass_s(UNIT, 6, 2 * (3 * 110 + 6), 220)       # 3 tokens each: pairs 2·(3·110 + 3·4/2)
    assert r["step_latency_s"] == pytest.approx(2 * draft_pass + verify, rel=1e-12)
    assert r["ttft_s"] == pytest.approx(prefill_s(UNIT, 2, 100), rel=1e-12)


def test_spec_step_overhead_is_added_to_a_speculative_step_only(tmp_path):
    rt = open(f"{D}/unit-rt.yaml").read() + "spec_step_overhead_s: {value: 2.0e-03, source: test}\n"
    p = tmp_path / "spec.yaml"
    p.write_text(rt)
    kw = dict(BASE, runtime=str(p), batch_size=2, prompt_len=100, gen_len=20)
    assert evaluate(kw)["step_latency_s"] == pytest.approx(pass_s(UNIT, 2, 222, 220), rel=1e-12)
    r = evaluate(dict(kw, strategy="speculative", draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5))
    step = 3 * pass_s(DRAFT, 2, 222, 220) + pass_s(UNIT, 8, 900, 220)
    assert r["step_latency_s"] == pytest.approx(2e-3 + step, rel=1e-12)


def test_speculative_draft_on_its_own_device_pays_the_link_by_hand():
    # separate_device on an 8-device node: scale-up link, 1e11 B/s, 10 µs. Per step: γ = 3 token ids
    # per sequence to the target (2·3·4 B) and γ + 1 back (2·4·4 B), α + S/β each
    r = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20, strategy="speculative",
                      draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5, draft_placement="separate_device"))
    link = (1e-5 + 24 / 1e11) + (1e-5 + 32 / 1e11)
    step = 3 * pass_s(DRAFT, 2, 222, 220) + pass_s(UNIT, 8, 900, 220) + link
    assert r["step_latency_s"] == pytest.approx(step, rel=1e-12)
    assert r["time_interconnect_s"] == pytest.approx(link, rel=1e-12)


def test_pipeline_parallel_step_adds_the_handoffs_by_hand():
    # pp = 2 on one node: the pass is both stages in sequence plus one activation hand-off of
    # 2 tokens · 64 · 2 B and the 2 sampled ids (4 B each) back, over the scale-up link (1e11 B/s, 10 µs)
    r = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20, n_devices=2, pipeline_parallel=2))
    handoff = (1e-5 + 2 * 64 * 2 / 1e11) + (1e-5 + 2 * 4 / 1e11)
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 2, 222, 220) + handoff, rel=1e-12)
    assert r["time_interconnect_s"] == pytest.approx(handoff, rel=1e-12)


def test_kv_dtype_halves_the_attention_bytes_by_hand():
    # fp8 KV: 1 byte per element, 2·2·16·1 = 64 B per token per layer instead of 128
    r = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20, kv_dtype="fp8"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 2, 222, 220, kv_elem_bytes=1.0), rel=1e-12)
    att_f, att_h = _attention_row(evaluate_passes(dict(BASE, batch_size=2, prompt_len=100, gen_len=20,
                                                       kv_dtype="fp8"))["decode"].cost)
    # 2 layers · (220 read + 2 written) · 64 B + q and o: 2 tokens · 2 · 64 · 2 B
    assert att_h == 2 * (222 * 64 + 2 * 2 * 64 * 2) == 29_440
    # int4 KV: 0.5 B + an fp16 scale and zero per 128 elements = 0.53125 B per element
    r4 = evaluate(dict(BASE, batch_size=2, prompt_len=100, gen_len=20, kv_dtype="int4"))
    assert r4["kv_cache_bytes"] == 2 * 120 * 2 * (2 * 2 * 16 * 0.53125)
    assert r4["step_latency_s"] == pytest.approx(pass_s(UNIT, 2, 222, 220, kv_elem_bytes=0.53125), rel=1e-12)


# --------------------------------------------------------------------------- trees
# tree_width = 2, tree_depth = 2: 2 + 4 = 6 nodes, parents (0, 0, 1, 1, 2, 2); verified with the root:
# q = 7 tokens per sequence; depths 1, 1, 2, 2, 2, 2 (Σ = 10); 4 leaves, each path 3 tokens with the root
TREE = dict(strategy="tree", tree_width=2, tree_depth=2, acceptance_rate=0.6)


def test_tree_verification_by_hand_for_each_kernel():
    kw = dict(BASE, **TREE, batch_size=2, prompt_len=100, gen_len=20, draft_model="none")
    L = 110
    # dense_masked: the whole 7 × (L + 7) block per sequence
    r = evaluate(dict(kw, attention_kernel="dense_masked"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 14, 2 * 7 * (L + 7), 2 * L), rel=1e-12)
    # prefix_aware: context for every token + only ancestor pairs inside the tree: 7 + Σ depths = 17
    r = evaluate(dict(kw, attention_kernel="prefix_aware"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 14, 2 * (7 * L + 17), 2 * L), rel=1e-12)
    assert r["verify_time_s"] == r["step_latency_s"]
    # per_branch: 4 branches of 3 tokens, each its own sequence: 12 tokens per prompt, causal pairs
    # 4·(3·4/2) = 24 plus 12·L context pairs; the context is read once per branch — 2·110·128 B = 28 kB
    # of one layer's KV fits the 10 MB L2, so the 3 re-reads of each context are L2 hits
    r = evaluate(dict(kw, attention_kernel="per_branch"))
    expected = pass_s(UNIT, 24, 2 * 24 + 2 * L * 12, 2 * L, kv_l2=2 * L * 3)
    assert r["step_latency_s"] == pytest.approx(expected, rel=1e-12)


def test_tree_per_branch_l2_hit_fraction_by_hand():
    # 8 prompts at L = 12,000 + 2/2 = 12,001: one layer's context KV is 8·12,001·128 B = 12,289,024 B,
    # more than the 1e7 B L2, so a re-read hits L2 with h = 1e7 / 12,289,024; each context is read by
    # 4 branches: once from HBM, 3 times more, a share h of those from L2
    kw = dict(BASE, **TREE, batch_size=8, prompt_len=12_000, gen_len=2, draft_model="none", attention_kernel="per_branch")
    L = 12_001
    h = 1e7 / (8 * L * 128)
    rereads = 8 * L * 3
    kv_hbm, kv_l2 = 8 * L + rereads * (1 - h), rereads * h
    r = evaluate(kw)
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 96, 8 * 24 + 8 * L * 12, kv_hbm, kv_l2=kv_l2), rel=1e-12)
    _f, att_h = _attention_row(evaluate_passes(kw)["verify"].cost)
    # 2 layers · (HBM context reads + 96 KV writes) · 128 B + q/o 96 · 2 · 64 · 2 B
    assert att_h == pytest.approx(2 * ((kv_hbm + 96) * 128 + 96 * 256), rel=1e-12)


def test_shared_prefix_per_branch_l2_hit_fraction_by_hand():
    # 2 prompts share a 50,000-token prefix across 4 branches; each branch has U = L − 50,000 = 1
    # unique token (L = 50,000 + 2/2). One layer's prefix KV: 2·50,000·128 B = 1.28e7 B, so
    # h = 1e7 / 1.28e7 = 0.78125. The prefix is read once from HBM and 3 more times per prompt:
    # 300,000 re-reads, 65,625 from HBM and 234,375 from L2; the 8 branches' own tokens 8·1
    kw = dict(BASE, batch_size=2, prompt_len=50_000, gen_len=2, strategy="shared_prefix", n_branches=4,
              shared_prefix_len=50_000, attention_kernel="per_branch")
    kv_hbm = 8 * 1 + 100_000 + 65_625
    r = evaluate(kw)
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 50_002, kv_hbm, kv_l2=234_375), rel=1e-12)
    _f, att_h = _attention_row(evaluate_passes(kw)["decode"].cost)
    assert att_h == 2 * ((kv_hbm + 8) * 128 + 8 * 256)
    # prefix_aware reads the prefix once and each branch's own token: 100,000 + 8, no L2 re-reads
    r = evaluate(dict(kw, attention_kernel="prefix_aware"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 50_002, 100_008), rel=1e-12)


def test_tree_step_with_a_draft_model_by_hand():
    """Draft passes of a separate draft model, one per level of the tree (draft tokens: the nodes of
    each level, 2 then 4 per sequence); then the verification of 7 tokens per sequence (prefix_aware)."""
    kw = dict(BASE, **TREE, batch_size=2, prompt_len=100, gen_len=20, draft_model=DRAFT_MODEL,
              attention_kernel="prefix_aware")
    L = 110
    r = evaluate(kw)
    verify = pass_s(UNIT, 14, 2 * (7 * L + 17), 2 * L)
    assert r["verify_time_s"] == pytest.approx(verify, rel=1e-12)
    assert r["step_latency_s"] == pytest.approx(r["draft_time_per_step_s"] + verify, rel=1e-12)
    # the draft model also reads the prompt
    assert r["ttft_s"] == pytest.approx(prefill_s(UNIT, 2, 100) + prefill_s(DRAFT, 2, 100), rel=1e-12)
    # one draft pass per level of the tree: 2 passes
    passes = evaluate_passes(kw)
    assert sum(1 for row in passes["draft"].cost.ops if row[0] == "qkv_proj") == 2


def test_tree_draft_runs_the_root_and_every_level_but_the_last():
    # the draft proposes level 1 from the root and level 2 from level 1's 2 nodes: 1 + 2 = 3 draft
    # tokens per sequence, 6 in all; its QKV projection (32·(32 + 2·16) = 2048 weights) does
    # 2·2048 FLOPs per token; the leaves (level 2) are never fed back to the draft
    kw = dict(BASE, **TREE, batch_size=2, prompt_len=100, gen_len=20, draft_model=DRAFT_MODEL,
              attention_kernel="prefix_aware")
    rows = [row for row in evaluate_passes(kw)["draft"].cost.ops if row[0] == "qkv_proj"]
    assert len(rows) == 2
    assert sum(float(row[1]) for row in rows) == 2 * 2048 * 6


# --------------------------------------------------------------------------- draft on its own device, overlapped
SEP = dict(BASE, batch_size=2, prompt_len=100, gen_len=20, strategy="speculative", draft_model=DRAFT_MODEL,
           gamma=3, draft_placement="separate_device")


def test_overlapped_draft_looks_ahead_at_batch_one_by_hand():
    # one sequence: D = 3 draft passes, V = the verification of 4 tokens, X = 3 ids out and 4 back;
    # the draft keeps drafting during V, usable with p = α^(γ·B) = 0.5^3: p·max(D, V) + (1 − p)·(D + V) + X
    D = 3 * pass_s(DRAFT, 1, 111, 110)
    V = pass_s(UNIT, 4, 450, 110)
    X = (1e-5 + 12 / 1e11) + (1e-5 + 16 / 1e11)
    lookahead = 0.5 ** 3 * max(D, V) + (1 - 0.5 ** 3) * (D + V) + X
    kw = dict(SEP, batch_size=1, acceptance_rate=0.5)
    r = evaluate(dict(kw, draft_schedule="overlap"))
    assert r["step_latency_s"] == pytest.approx(lookahead, rel=1e-12)
    # the time by bound is the serial step's, scaled to the shorter step; the work is unchanged
    parts = sum(r[f"time_{b}_s"] for b in ("compute", "memory", "l2", "interconnect", "launch"))
    assert parts == pytest.approx(lookahead, rel=1e-12)
    serial = evaluate(kw)
    assert serial["step_latency_s"] == pytest.approx(D + V + X, rel=1e-12)
    assert r["time_interconnect_s"] == pytest.approx(X * lookahead / (D + V + X), rel=1e-12)
    assert r["flops_per_step"] == serial["flops_per_step"] and r["hbm_bytes_per_step"] == serial["hbm_bytes_per_step"]
    # τ given instead of α: the look-ahead uses the α that gives τ = 1.875 with γ = 3, i.e. 0.5
    r_tau = evaluate(dict(kw, acceptance_rate=None, mean_accepted_tokens=1.875, draft_schedule="overlap"))
    assert r_tau["step_latency_s"] == pytest.approx(lookahead, rel=1e-9)


def test_overlapped_draft_runs_two_half_batches_by_hand():
    # two sequences over a link whose 10 µs latency dwarfs the passes: p = 0.5^6 makes the look-ahead
    # nearly serial, while two half-batches in flight pay one half's transfers: max(2·D½, 2·V½, D½ + V½ + X½)
    D, V = 3 * pass_s(DRAFT, 2, 222, 220), pass_s(UNIT, 8, 900, 220)
    X = (1e-5 + 24 / 1e11) + (1e-5 + 32 / 1e11)
    Dh, Vh = 3 * pass_s(DRAFT, 1, 111, 110), pass_s(UNIT, 4, 450, 110)
    Xh = (1e-5 + 12 / 1e11) + (1e-5 + 16 / 1e11)
    lookahead = 0.5 ** 6 * max(D, V) + (1 - 0.5 ** 6) * (D + V) + X
    halves = max(2 * Dh, 2 * Vh, Dh + Vh + Xh)
    assert halves < lookahead < D + V + X
    r = evaluate(dict(SEP, acceptance_rate=0.5, draft_schedule="overlap"))
    assert r["step_latency_s"] == pytest.approx(halves, rel=1e-12)


def test_overlapped_tree_draft_is_serial():
    # no look-ahead is priced for trees (p = 0) and no half batches: D + V + X
    kw = dict(SEP, **TREE, attention_kernel="prefix_aware")
    kw.pop("gamma")
    assert evaluate(dict(kw, draft_schedule="overlap"))["step_latency_s"] == \
        pytest.approx(evaluate(kw)["step_latency_s"], rel=1e-12)


# --------------------------------------------------------------------------- tree shapes
def test_explicit_tree_parents_by_hand():
    from costmodel import InputError
    # parents (0, 0, 1, 1): the root has 2 children (ranks 1, 2), node 1 has 2 (ranks 1, 2);
    # τ = 1 + 0.6 + 0.2 + 0.6·0.6 + 0.6·0.2 = 2.28
    kw = dict(BASE, batch_size=2, prompt_len=100, gen_len=20, strategy="tree", draft_model="none",
              tree_parents="0,0,1,1", rank_acceptance="0.6,0.2", attention_kernel="prefix_aware")
    r = evaluate(kw)
    assert r["tokens_per_step"] == pytest.approx(2.28, rel=1e-12)
    # 5 tokens per sequence with the root; ancestor pairs 5 + Σ depths (1 + 1 + 2 + 2) = 11
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 10, 2 * (5 * 110 + 11), 220), rel=1e-12)
    with pytest.raises(InputError, match="parent of node 2 is 2") as e:
        evaluate(dict(kw, tree_parents="0,2"))
    assert e.value.field == "tree_parents"


def test_full_tree_size_limit():
    from costmodel import InputError
    from costmodel.engine.tree import MAX_TREE_NODES, full_tree
    assert full_tree(MAX_TREE_NODES, 1).n_nodes == 1024          # exactly the limit is allowed
    with pytest.raises(InputError, match="1025 nodes") as e:
        full_tree(MAX_TREE_NODES + 1, 1)
    assert e.value.field == "tree_width"


# --------------------------------------------------------------------------- attention FLOPs: the pairs
# A short decode step is memory-bound, so its time does not show the attention's pairs; its FLOPs do:
# 4 · heads · head_dim = 4·4·16 = 256 FLOPs per (query, key) pair per layer, 2 layers.

def _attention_flops(record, pass_name):
    return _attention_row(evaluate_passes(record)[pass_name].cost)[0]


def test_attention_pairs_of_each_pass_by_hand():
    kw = dict(BASE, batch_size=2, prompt_len=100, gen_len=20)
    assert _attention_flops(kw, "decode") == 2 * 256 * 2 * 111
    assert _attention_flops(kw, "prefill") == 2 * 256 * 10_100
    spec = dict(kw, strategy="speculative", draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5)
    assert _attention_flops(spec, "verify") == 2 * 256 * 900
    # the unit draft: 1 layer, 4·2·16 = 128 FLOPs per pair; 3 passes of 2·111 pairs
    rows = [r for r in evaluate_passes(spec)["draft"].cost.ops if r[0] == "attention"]
    assert sum(float(r[1]) for r in rows) == 3 * 128 * 222
    tree = dict(kw, **TREE, draft_model="none")
    assert _attention_flops(dict(tree, attention_kernel="dense_masked"), "verify") == 2 * 256 * 2 * 7 * 117
    assert _attention_flops(dict(tree, attention_kernel="prefix_aware"), "verify") == 2 * 256 * 2 * (7 * 110 + 17)
    assert _attention_flops(dict(tree, attention_kernel="per_branch"), "verify") == 2 * 256 * 2 * (24 + 110 * 12)


def test_shared_prefix_pairs_and_kernels_by_hand():
    # 2 prompts × 4 branches, prefix 50,000, 1 unique token per branch (L = 50,001): every branch's query
    # sees its whole context plus itself, 8·50,002 pairs, with a per-branch or a prefix-aware kernel
    kw = dict(BASE, batch_size=2, prompt_len=50_000, gen_len=2, strategy="shared_prefix", n_branches=4,
              shared_prefix_len=50_000)
    for kernel in ("per_branch", "prefix_aware"):
        assert _attention_flops(dict(kw, attention_kernel=kernel), "decode") == 2 * 256 * 8 * 50_002
    # dense_masked: one block over the prompt's prefix and all 4 branches' tokens: 8·(50,000 + 4 + 1)
    # pairs, the KV read once per prompt: 2·(50,000 + 4)
    dense = dict(kw, attention_kernel="dense_masked")
    assert _attention_flops(dense, "decode") == 2 * 256 * 8 * 50_005
    assert evaluate(dense)["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 50_005, 100_008), rel=1e-12)
    # without sharing each of the 8 branches would store its 50,002 tokens (256 B each); under pp = 2
    # that is still the whole cache over both devices
    for extra in ({}, dict(n_devices=2, pipeline_parallel=2)):
        r = evaluate(dict(dense, **extra))
        assert r["kv_cache_bytes_unshared"] == 8 * 50_002 * 256
        assert r["kv_cache_bytes"] == 2 * (50_000 + 4 * 2) * 256
    # shared_prefix_len = 0: the whole prompt is the prefix
    whole = evaluate(dict(dense, shared_prefix_len=0))
    assert whole["step_latency_s"] == evaluate(dense)["step_latency_s"]


def _ar_ctx(rt_changes=None, **kw):
    import dataclasses
    from costmodel.engine.evaluate import build_exec, make_ctx
    from costmodel.inputs.record import parse_record
    rec = parse_record(dict(BASE, **kw))
    ex = build_exec(rec)
    if rt_changes:
        ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, **rt_changes))
    return make_ctx(rec, ex)


def test_autoregressive_priced_at_a_given_batch_and_prompt_equals_that_record():
    # the baseline callers price AR at other (B, P) than the record's: B = 3, P = 50 given to a
    # B = 1, P = 1 record must equal the B = 3, P = 50 record (same G = 20), with 1 ms host work per
    # sequence per step: the step is the decode pass + 3 · 1 ms
    from costmodel.engine.strategies.autoregressive import ar_decode_pass, ar_step, autoregressive
    per_seq = {"host_per_seq_s": 1e-3}
    ref_ctx = _ar_ctx(per_seq, batch_size=3, prompt_len=50, gen_len=20)
    ctx = _ar_ctx(per_seq, batch_size=1, prompt_len=1, gen_len=20)
    ref, got = autoregressive(ref_ctx), autoregressive(ctx, B=3.0, P=50.0)
    decode = float(ar_decode_pass(ref_ctx).time_s)
    assert float(ref.step.time_s) == pytest.approx(decode + 3e-3, rel=1e-12)
    assert float(ar_step(ref_ctx).time_s) == pytest.approx(decode + 3e-3, rel=1e-12)
    assert float(ar_step(ctx, 3.0, 50.0).time_s) == float(ref.step.time_s)
    assert float(ar_decode_pass(ctx, 3.0, 50.0).time_s) == decode
    assert float(got.step.time_s) == float(ref.step.time_s)
    assert float(got.prefill.time_s) == float(ref.prefill.time_s)
    assert float(got.n_seqs) == 3.0 and float(got.tokens_per_step) == 1.0
    assert float(got.memory.kv_total_bytes) == float(ref.memory.kv_total_bytes) == 3 * 70 * 2 * 128  # 2 layers · 128 B
    assert {k: float(v) for k, v in got.memory.device.items()} == {k: float(v) for k, v in ref.memory.device.items()}
    assert got.passes["decode"].ex is ctx.ex and got.passes["prefill"].ex is ctx.ex


def test_autoregressive_decode_scores_over_the_mean_context(tmp_path):
    # unfused kernel, B = 1, P = 1, G = 1000: the decode pass attends over L + 1 = 1 + 500 + 1 = 502
    # positions (the prefill's 1 × 1 block is smaller): 4 B · 4 heads · 502
    rt = open(f"{D}/unit-rt.yaml").read().replace("fused_attention: true", "fused_attention: false")
    p = tmp_path / "unfused.yaml"
    p.write_text(rt)
    r = evaluate(dict(BASE, runtime=str(p), batch_size=1, prompt_len=1, gen_len=1000))
    assert r["memory_attention_scores_bytes"] == 4 * 4 * 502


# --------------------------------------------------------------------------- prefill (strategies.common)
def test_prefill_waits_for_one_scheduler_invocation_and_each_sequence():
    # host work 1 ms per scheduler invocation and 0.1 ms per sequence, 4 decode steps per invocation:
    # a decode step waits 1/4 ms + 2 · 0.1 ms; the prefill is an invocation of its own: 1 ms + 2 · 0.1 ms
    from costmodel.engine.strategies.autoregressive import ar_decode_pass, ar_step
    from costmodel.engine.strategies.common import prefill_cost
    ctx = _ar_ctx({"host_step_s": 1e-3, "host_per_seq_s": 1e-4, "scheduler": (("num_scheduler_steps", 4),)},
                  batch_size=2, prompt_len=100, gen_len=20)
    prefill = pass_s(UNIT, 200, 10_100, 200, lm=2)
    assert float(prefill_cost(ctx).time_s) == pytest.approx(prefill + 1e-3 + 2e-4, rel=1e-12)
    assert float(ar_step(ctx).time_s) == pytest.approx(float(ar_decode_pass(ctx).time_s) + 0.25e-3 + 2e-4, rel=1e-12)
    # chunked (64 tokens: 4 passes of 50): the prefill still waits once
    ctx = _ar_ctx({"host_step_s": 1e-3, "host_per_seq_s": 1e-4, "scheduler": (("num_scheduler_steps", 4),),
                   "prefill_chunk_tokens": 64}, batch_size=2, prompt_len=100, gen_len=20)
    assert float(prefill_cost(ctx).time_s) == pytest.approx(4 * pass_s(UNIT, 50, 2525, 50, lm=0.5) + 1e-3 + 2e-4,
                                                             rel=1e-12)


def test_prefill_one_prompt_at_a_time_by_hand():
    # 2 prompts of 100 prefilled one by one: 2 passes of 100 tokens, 5050 pairs, 1 logit row each
    from costmodel.engine.strategies.common import prefill_cost
    ctx = _ar_ctx({"prefill_per_sequence": True}, batch_size=2, prompt_len=100, gen_len=20)
    assert float(prefill_cost(ctx).time_s) == pytest.approx(2 * pass_s(UNIT, 100, 5050, 100, lm=1), rel=1e-12)
    # and chunked at 64: each prompt as ceil(100/64) = 2 passes of 50 tokens (half the pairs, half a logit row)
    ctx = _ar_ctx({"prefill_per_sequence": True, "prefill_chunk_tokens": 64}, batch_size=2, prompt_len=100, gen_len=20)
    assert float(prefill_cost(ctx).time_s) == pytest.approx(2 * 2 * pass_s(UNIT, 50, 2525, 50, lm=0.5), rel=1e-12)


def test_one_token_prompts_prefill_by_hand():
    # P = 1: each of 2 prompts is 1 token attending to itself: 2 tokens, 2 pairs, 2 KV tokens, 2 logit rows
    from costmodel.engine.strategies.common import prefill_cost
    ctx = _ar_ctx(batch_size=2, prompt_len=1, gen_len=20)
    assert float(prefill_cost(ctx).time_s) == pytest.approx(pass_s(UNIT, 2, 2, 2, lm=2), rel=1e-12)


def _windowed_unit(tmp_path, window):
    p = tmp_path / f"unit-window-{window}.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", f"id: unit-window-{window}")
                 + f"attention:\n  window: {window}\n  global_layer_every: 2\n")
    return str(p)


def test_windowed_layer_reads_at_most_seqs_times_window_in_prefill(tmp_path):
    # unit model with 1 global and 1 windowed layer (window 64); 2 prompts of 100 in one pass of 200
    # tokens: the windowed layer reads min(200, 2 · 64) = 128 KV tokens, writes 200, q and o 200 · 2·64·2 B;
    # 128 B of KV per token and layer
    from costmodel.engine.evaluate import evaluate_passes
    p = evaluate_passes(dict(BASE, model=_windowed_unit(tmp_path, 64), batch_size=2, prompt_len=100, gen_len=20))
    (row,) = [r for r in p["prefill"].cost.ops if r[0] == "attention_window"]
    assert float(row[2]) == 128 * 128 + 200 * 128 + 200 * 256 == 93_184
    # chunks of 64 (window 16): 4 passes of 50 tokens, each reading min(50, 2 · 16) = 32 KV tokens
    rt = open(f"{D}/unit-rt.yaml").read() + "prefill_chunk_tokens: {value: 64, source: test}\n"
    (tmp_path / "chunked.yaml").write_text(rt)
    p = evaluate_passes(dict(BASE, model=_windowed_unit(tmp_path, 16), runtime=str(tmp_path / "chunked.yaml"),
                             batch_size=2, prompt_len=100, gen_len=20))
    (row,) = [r for r in p["prefill"].cost.ops if r[0] == "attention_window"]
    assert float(row[2]) == 4 * (32 * 128 + 50 * 128 + 50 * 256) == 93_184
