"""Shared-prefix decoding by hand on the unit device (tests/handcalc.py): a prefix shorter than the
prompt, each kernel's pass, the stored and unshared KV, memory, outputs per sequence, launches and
host work per branch, per-branch re-reads when L2 binds.

unit-model: 2 layers, 256 B of KV per token (128 B per layer), d 64, q 64, kv 32, d_ff 128, vocab 1000.
"""

import dataclasses
import os

import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import evaluate_passes
from handcalc import UNIT, pass_s, prefill_s

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml")
# 2 prompts of 100 tokens share their first 60 across 4 branches; 20 generated: L = 100 + 20/2 = 110,
# so each branch holds U = 110 − 60 = 50 tokens of its own on average (60 at the peak, 120 − 60)
PARTIAL = dict(BASE, batch_size=2, prompt_len=100, gen_len=20, strategy="shared_prefix", n_branches=4,
               shared_prefix_len=60)


def test_a_prefix_shorter_than_the_prompt_by_hand_for_each_kernel():
    # prefix_aware: 8 branch tokens, each attending to its 110 tokens + itself: 8·111 pairs; KV read
    # 2·(60 + 4·50) = 520 tokens per layer
    r = evaluate(dict(PARTIAL, attention_kernel="prefix_aware"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 111, 520), rel=1e-12)
    # dense_masked: each query scored against the prefix and all 4 branches' tokens: 8·(60 + 200 + 1)
    r = evaluate(dict(PARTIAL, attention_kernel="dense_masked"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 261, 520), rel=1e-12)
    # memory-bound on the unit device: the pairs show in the attention FLOPs, 2 layers · 4·4·16 per pair
    (row,) = [x for x in evaluate_passes(dict(PARTIAL, attention_kernel="dense_masked"))["decode"].cost.ops
              if x[0] == "attention"]
    assert float(row[1]) == 2 * 256 * 8 * 261
    # per_branch: the 2·60 prefix tokens' KV (15,360 B of one layer) fit the 1e7 B L2 (h = 1): each
    # prefix read once from HBM, 3 more times from L2 (360); the 8 branches' own 50 from HBM
    r = evaluate(dict(PARTIAL, attention_kernel="per_branch"))
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 111, 8 * 50 + 120, kv_l2=360), rel=1e-12)


def test_stored_and_unshared_kv_of_a_partial_prefix_by_hand():
    # stored: 2·(60 + 4·60) = 600 tokens · 256 B; unshared: 8 sequences · 120 tokens · 256 B
    r = evaluate(PARTIAL)
    assert r["kv_cache_bytes"] == 600 * 256
    assert r["kv_cache_bytes_unshared"] == 8 * 120 * 256
    assert r["shared_prefix_len"] == 60
    # tp = 2 splits each token's 2 KV heads over 2 devices: the unshared total is still the whole cache
    r2 = evaluate(dict(PARTIAL, n_devices=2, tensor_parallel=2))
    assert r2["kv_cache_bytes_unshared"] == 8 * 120 * 256
    # shared_prefix_len = 0: the whole 100-token prompt is the prefix (reported as such)
    assert evaluate(dict(PARTIAL, shared_prefix_len=0))["shared_prefix_len"] == 100


def test_a_one_token_prefix_is_a_prefix():
    # shared_prefix_len = 1: one token shared, U = 110 − 1 = 109 per branch; prefix_aware reads
    # 2·(1 + 4·109) = 874 tokens per layer
    r = evaluate(dict(PARTIAL, shared_prefix_len=1, attention_kernel="prefix_aware"))
    assert r["shared_prefix_len"] == 1
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 8, 8 * 111, 874), rel=1e-12)


def test_every_branch_is_a_sequence_of_one_token_per_step():
    r = evaluate(PARTIAL)
    assert r["n_sequences"] == 8
    assert r["tokens_per_step"] == 1.0
    assert r["tokens_per_s"] == pytest.approx(8 / r["step_latency_s"], rel=1e-12)
    assert r["tokens_per_s_per_seq"] == pytest.approx(1 / r["step_latency_s"], rel=1e-12)


def test_activations_peak_in_the_prefill_by_hand():
    # per token (2·64 + (64 + 2·32) + 64 + 3·128)·2 B = 1,408 B; the prefill's 200 tokens and 2 logit
    # rows (1000 · 4 B) outweigh the decode's 8 tokens and 8 rows
    r = evaluate(PARTIAL)
    assert r["memory_activations_bytes"] == 200 * 1408 + 2 * 4000


def test_named_passes_are_the_prefill_and_the_decode():
    passes = evaluate_passes(dict(PARTIAL, attention_kernel="prefix_aware"))
    assert passes["prefill"].cost.time_s == pytest.approx(prefill_s(UNIT, 2, 100), rel=1e-12)
    assert passes["decode"].cost.time_s == pytest.approx(pass_s(UNIT, 8, 8 * 111, 520), rel=1e-12)
    for name in ("prefill", "decode"):
        assert passes[name].ex.model.n_layers == 2 and passes[name].ex.tp == 1


def test_prefix_aware_launches_two_attention_kernels_per_layer(tmp_path):
    # a host-bound runtime: 1 ms of host work per kernel, 10 kernels per layer (the attention one of
    # them) and 5 per pass. prefix_aware runs a prefix and a suffix kernel: 2·(10 − 1 + 2) + 5 = 27
    # launches, 27 ms, far above the pass's microseconds on the device; per_branch launches its
    # attention once per layer here (one batched call): 2·10 + 5 = 25
    rt = open(f"{D}/unit-rt.yaml").read()
    rt = (rt.replace("kernels_per_layer: {value: 0", "kernels_per_layer: {value: 10")
            .replace("kernels_per_pass: {value: 0", "kernels_per_pass: {value: 5")
            .replace("host_per_kernel_s: {value: 0.0", "host_per_kernel_s: {value: 1.0e-03"))
    p = tmp_path / "launch.yaml"
    p.write_text(rt)
    r = evaluate(dict(PARTIAL, runtime=str(p), attention_kernel="prefix_aware"))
    assert r["step_latency_s"] == pytest.approx(27e-3, rel=1e-12)
    r = evaluate(dict(PARTIAL, runtime=str(p), attention_kernel="per_branch"))
    assert r["step_latency_s"] == pytest.approx(25e-3, rel=1e-12)


def test_host_work_is_per_branch():
    # host_per_seq_s = 1 ms per running sequence per step: the 2 prompts' 8 branches each sample and
    # stream their own token, 8 ms over the pass (the autoregressive baseline of the same 8 sequences
    # waits for the same 8 ms)
    from costmodel.engine.evaluate import build_exec, make_ctx
    from costmodel.engine.strategies import STRATEGY_FUNCS
    from costmodel.inputs.record import parse_record
    rec = parse_record(dict(PARTIAL, attention_kernel="prefix_aware"))
    ex = build_exec(rec)
    ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, host_per_seq_s=1e-3))
    out = STRATEGY_FUNCS["shared_prefix"](make_ctx(rec, ex))
    assert float(out.step.time_s) == pytest.approx(8e-3 + pass_s(UNIT, 8, 8 * 111, 520), rel=1e-12)


def test_per_branch_rereads_from_l2_bind_by_hand():
    # 2 prompts share 40,000 tokens across 64 branches, U = 1 (L = 40,001). One layer's prefix KV:
    # 2·40,000·128 B = 1.024e7 B, so h = 1e7 / 1.024e7 = 0.9765625. Re-reads: 2·40,000·63 = 5,040,000,
    # 4,921,875 from L2 and 118,125 from HBM; HBM also reads each prefix once (80,000) and the 128
    # branches' own token. The L2 term (HBM + L2 bytes at 1e13 B/s) is the largest: ≈ 6.5e-5 s against
    # ≈ 2.5e-5 s of HBM and 1.3e-5 s of FLOPs
    kw = dict(BASE, batch_size=2, prompt_len=40_000, gen_len=2, strategy="shared_prefix", n_branches=64,
              shared_prefix_len=40_000, attention_kernel="per_branch")
    kv_hbm, kv_l2 = 128 + 80_000 + 118_125, 4_921_875
    r = evaluate(kw)
    assert r["step_latency_s"] == pytest.approx(pass_s(UNIT, 128, 128 * 40_002, kv_hbm, kv_l2=kv_l2), rel=1e-12)
    hbm_b = (kv_hbm + 128) * 128 + 128 * 256
    assert (hbm_b + kv_l2 * 128) / 1e13 > max(hbm_b / 1e12, 4 * 64 * 128 * 40_002 / 1e14)
