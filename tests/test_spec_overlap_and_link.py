"""Chain speculation's less common paths, by hand on the unit device: a given τ under lock-step, τ and γ
over arrays, an EAGLE head's hidden states on the draft link, which link a separate draft uses, the
look-ahead probability with acceptance by position, and two half-batches in flight when the passes
are compute-bound (their time and their work).

unit-hw: scale-up link 1e11 B/s and 10 µs, network 1e10 B/s and 20 µs, 8 devices per node.
"""

import dataclasses
import importlib
import os

import numpy as np
import pytest

from costmodel import evaluate
from costmodel.engine.evaluate import _execs, make_ctx
from costmodel.inputs.record import parse_record
from handcalc import UNIT, pass_s

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
            batch_size=2, prompt_len=100, gen_len=20, strategy="speculative")
DRAFT_MODEL = f"{D}/unit-draft.yaml"
spec = importlib.import_module("costmodel.engine.strategies.speculative")   # the module, not its function


def _ctx(arrays=None, **kw):
    rec = parse_record(dict(BASE, **kw))
    ex, draft = _execs(rec)
    return make_ctx(rec, ex, arrays), draft


# --------------------------------------------------------------------------- tokens per step
def test_lockstep_spreads_a_given_tau_as_the_alpha_that_gives_it():
    # γ = 2, τ = 1.75 = 1 + α + α² at α = 0.5; a lock-step batch advances by its shortest accepted
    # prefix: Σ_{j=0..γ} α^(j·B) = 1 + 0.5^B + 0.25^B
    kw = dict(draft_model="none", gamma=2, mean_accepted_tokens=1.75, batch_sync="lockstep")
    assert evaluate(dict(BASE, **kw))["tokens_per_step"] == pytest.approx(1 + 0.25 + 0.0625, rel=1e-9)
    assert evaluate(dict(BASE, **kw, batch_size=3))["tokens_per_step"] == pytest.approx(1 + 0.125 + 1 / 64, rel=1e-9)
    # ragged batches keep τ as given
    assert evaluate(dict(BASE, **dict(kw, batch_sync="ragged")))["tokens_per_step"] == 1.75


def test_a_given_tau_broadcasts_against_an_array_of_gammas_and_back():
    ctx, _ = _ctx({"gamma": np.array([2.0, 3.0, 4.0])}, draft_model="none", gamma=2, mean_accepted_tokens=1.75)
    assert spec.tokens_per_step(ctx, ctx.gamma).tolist() == [1.75, 1.75, 1.75]
    ctx, _ = _ctx({"mean_accepted_tokens": np.array([1.5, 1.75])}, draft_model="none", gamma=2,
                  mean_accepted_tokens=1.75)
    assert spec.tokens_per_step(ctx, ctx.gamma).tolist() == [1.5, 1.75]


# --------------------------------------------------------------------------- the draft link
@pytest.mark.parametrize("head, layers", [("eagle", 1), ("eagle3", 3)])
def test_a_head_on_its_own_device_also_sends_back_the_hidden_states(head, layers):
    # B = 2, γ = 3 over the scale-up link: 2·3 ids of 4 B out; back 2·4 ids of 4 B plus the target's
    # hidden states of those 2·4 tokens, d_model 64 · 2 B each (EAGLE-3: three layers' states)
    r = evaluate(dict(BASE, draft_model=head, gamma=3, acceptance_rate=0.5, draft_placement="separate_device"))
    back = 2 * 4 * 4 + layers * 2 * 4 * 64 * 2
    assert r["time_interconnect_s"] == pytest.approx((1e-5 + 24 / 1e11) + (1e-5 + back / 1e11), rel=1e-12)


def test_a_draft_on_another_node_uses_the_network():
    r = evaluate(dict(BASE, draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5, draft_placement="separate_node"))
    assert r["time_interconnect_s"] == pytest.approx((2e-5 + 24 / 1e10) + (2e-5 + 32 / 1e10), rel=1e-12)


def test_a_target_filling_its_node_pushes_a_separate_draft_onto_the_network():
    # tp 4 × pp 2 = 8 devices, the whole node: the draft's device is on another node (network)
    ctx, _ = _ctx(draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5, draft_placement="separate_device",
                  n_devices=8, pipeline_parallel=2)
    assert ctx.ex.tp * ctx.ex.pp == 8
    x = spec.link_transfer(ctx, 3.0)
    assert x.time_s == pytest.approx((2e-5 + 24 / 1e10) + (2e-5 + 32 / 1e10), rel=1e-12)


# --------------------------------------------------------------------------- look-ahead
def test_look_ahead_probability_with_acceptance_by_position():
    # p = (Π_{i≤γ} α_i)^B: all γ drafts of every sequence accepted; positions beyond γ do not enter
    ctx, _ = _ctx(draft_model=DRAFT_MODEL, gamma=3, acceptance_by_position="0.8,0.5,0.25", batch_size=2)
    assert float(spec.lookahead_probability(ctx)) == pytest.approx((0.8 * 0.5 * 0.25) ** 2, rel=1e-12)
    ctx, _ = _ctx(draft_model=DRAFT_MODEL, gamma=2, acceptance_by_position="0.8,0.5,0.25", batch_size=3)
    assert float(spec.lookahead_probability(ctx)) == pytest.approx((0.8 * 0.5) ** 3, rel=1e-12)
    # γ over an array: each γ takes its own prefix of the positions
    ctx, _ = _ctx({"gamma": np.array([2.0, 3.0])}, draft_model=DRAFT_MODEL, gamma=3,
                  acceptance_by_position="0.8,0.5,0.25", batch_size=2)
    assert spec.lookahead_probability(ctx).tolist() == pytest.approx([0.4 ** 2, 0.1 ** 2], rel=1e-12)
    # from α: α^(γ·B)
    ctx, _ = _ctx(draft_model=DRAFT_MODEL, gamma=3, acceptance_rate=0.5, batch_size=2)
    assert float(spec.lookahead_probability(ctx)) == 0.5 ** 6


# --------------------------------------------------------------------------- two half-batches in flight
def test_compute_bound_half_batches_by_hand():
    # The target drafts for itself on a second device (draft = the unit model): at B = 512 the passes are
    # compute-bound, so two half-batches of 256 cost about what one batch of 512 does:
    # step = max(2·D½, 2·V½, D½ + V½ + X½) < D + V + X (serial; the look-ahead's p = 0.5^1536 ≈ 0)
    B, half, L = 512, 256, 110
    kw = dict(BASE, batch_size=B, draft_model=f"{D}/unit-model.yaml", gamma=3, acceptance_rate=0.5,
              draft_placement="separate_device")

    def draft_s(b):
        return 3 * pass_s(UNIT, b, b * (L + 1), b * L)

    def verify_s(b):
        return pass_s(UNIT, 4 * b, b * (4 * L + 10), b * L)

    def link_s(b):
        return (1e-5 + b * 3 * 4 / 1e11) + (1e-5 + b * 4 * 4 / 1e11)

    Dh, Vh, Xh = draft_s(half), verify_s(half), link_s(half)
    serial = draft_s(B) + verify_s(B) + link_s(B)
    halves = max(2 * Dh, 2 * Vh, Dh + Vh + Xh)
    assert halves < serial
    r = evaluate(dict(kw, draft_schedule="overlap"))
    assert r["step_latency_s"] == pytest.approx(halves, rel=1e-12)
    # the work is that of two half batches: twice a serial step's at B = 256 (links carry no FLOPs or HBM bytes)
    h = evaluate(dict(kw, batch_size=half))
    assert r["flops_per_step"] == pytest.approx(2 * h["flops_per_step"], rel=1e-12)
    assert r["hbm_bytes_per_step"] == pytest.approx(2 * h["hbm_bytes_per_step"], rel=1e-12)
    # an odd batch splits as ceil(B/2) = 257 per half
    r_odd = evaluate(dict(kw, batch_size=513, draft_schedule="overlap"))
    Dh, Vh, Xh = draft_s(257), verify_s(257), link_s(257)
    assert r_odd["step_latency_s"] == pytest.approx(max(2 * Dh, 2 * Vh, Dh + Vh + Xh), rel=1e-12)
    # and does the work of 2·257 = 514 sequences (an even batch's halves do exactly the whole batch's work)
    h_odd = evaluate(dict(kw, batch_size=257))
    assert r_odd["flops_per_step"] == pytest.approx(2 * h_odd["flops_per_step"], rel=1e-12)
    assert r_odd["hbm_bytes_per_step"] == pytest.approx(2 * h_odd["hbm_bytes_per_step"], rel=1e-12)


def test_half_batch_step_attribution_sums_to_the_step():
    kw = dict(BASE, batch_size=512, draft_model=f"{D}/unit-model.yaml", gamma=3, acceptance_rate=0.5,
              draft_placement="separate_device", draft_schedule="overlap")
    r = evaluate(kw)
    parts = sum(r[f"time_{b}_s"] for b in ("compute", "memory", "l2", "interconnect", "launch"))
    assert parts == pytest.approx(r["step_latency_s"], rel=1e-12)


def test_host_work_of_a_chain_step_per_method_and_per_sequence():
    # the runtime's spec host work for the EAGLE path (10 ops of 1 µs) and 1 µs per running sequence
    # (B = 2): 10 µs + 2 µs on top of the same step without them
    # (the baseline launches its kernels at the same 1 µs each: the EAGLE passes' fusion FCs are kernels)
    ctx, draft = _ctx(draft_model="eagle", gamma=3, acceptance_rate=0.5)
    base_rt = dataclasses.replace(ctx.ex.rt, host_per_kernel_s=1e-6)
    plain = spec.speculative(dataclasses.replace(ctx, ex=dataclasses.replace(ctx.ex, rt=base_rt)), draft).step.time_s
    rt = dataclasses.replace(base_rt, spec_step_host_ops=(("eagle", 10.0),), host_per_seq_s=1e-6)
    ctx2 = dataclasses.replace(ctx, ex=dataclasses.replace(ctx.ex, rt=rt))
    assert spec.speculative(ctx2, draft).step.time_s == pytest.approx(plain + 10e-6 + 2e-6, rel=1e-12)
