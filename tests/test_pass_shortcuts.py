"""The pass evaluator's shortcuts for operators whose binding term is settled without comparing the
terms element by element (costmodel.engine.pass_cost): every answer they give equals the stacked
max/argmax of the roofline terms (roofline.op_terms) bit for bit, and they decline what they cannot
show. The whole passes are compared with the reference pass (roofline.reference_pass_cost)."""

import math

import numpy as np
import pytest

from costmodel.engine import pass_cost as pc
from costmodel.engine.evaluate import build_exec
from costmodel.engine.ops import AffineOp, layer_ops
from costmodel.engine.roofline import operator_rows, reference_pass_cost
from costmodel.engine.strategies.common import decode_shape, prefill_shape
from costmodel.inputs.record import parse_record


from tests.passcheck import assert_answers_match_reference, assert_pass_equals_reference
from tests.passcheck import bits_equal as _bits_equal, exec_for as _exec, ref_op_time as _ref_op_time


def _coefficients(rng):
    """A random GEMM's f1, h0 (0 half of the time), h1 over 12 decades."""
    return 10 ** rng.uniform(0, 12), 10 ** rng.uniform(0, 12) * rng.integers(0, 2), 10 ** rng.uniform(-3, 6)


def _swap(x, coefficients):
    return coefficients, x


def _random_gemms_answered(ex, rng, draw, answer, n=300) -> int:
    """How many of ``n`` random GEMMs (``draw()`` -> ((f1, h0, h1), token array), then a dequantisation
    term drawn half of the time) ``answer(op, ex)`` answers; every answer must be the reference
    max/argmax bit for bit."""
    answered = 0
    for _ in range(n):
        (f1, h0, h1), x = draw()
        op = AffineOp("r", "matrix", 1, x, f1=f1, h0=h0, h1=h1, dequant_flops=float(rng.integers(0, 2)) * 1e6)
        got = answer(op, ex)
        if got is None:
            continue
        answered += 1
        want_t, want_i = _ref_op_time(op, ex)
        assert _bits_equal(got[0], want_t) and np.array_equal(np.broadcast_to(got[1], want_i.shape), want_i)
    return answered


# the batch x prompt grid of a sweep chunk: a prefill over B·P tokens runs from 16 tokens (its GEMMs
# bound by their weights) to 1,040,000 (bound by their FLOPs)
B = np.arange(1.0, 66.0).reshape(-1, 1)
P = np.arange(16.0, 16001.0, 16.0).reshape(1, -1)


@pytest.mark.parametrize("setup", [
    dict(model="llama-68m", hardware="a100-80gb"),
    dict(model="llama-2-7b", hardware="h100-sxm", weight_dtype="int4"),      # dequantisation FLOPs in c
    dict(model="llama-2-13b", hardware="t4", runtime="eager"),
])
def test_gemm_across_the_ridge_equals_the_stacked_terms(setup):
    """A prefill's GEMMs over 16 .. 1.04 M tokens cross their ridge inside the grid (the dominant-term
    shortcut declines them); the across-the-ridge shortcut prices them, and its time and bound are
    the stacked max/argmax of the four terms, element for element."""
    ex = _exec(**setup)
    fired = 0
    for op in layer_ops(prefill_shape(B, P), ex):
        if type(op) is not AffineOp or op.kind != "matrix" or pc._ends(op.x) is None:
            continue
        ends = pc._ends(op.x)
        assert pc._dominant_term(op, ex, ends) is None, op.name      # both bounds occur in the grid
        want_t, want_i = _ref_op_time(op, ex)
        got = pc._gemm_across_ridge(op, ex, ends)
        assert got is not None, op.name
        fired += 1
        assert _bits_equal(got[0], want_t), op.name
        assert np.array_equal(np.broadcast_to(got[1], want_i.shape), want_i), op.name
        assert set(np.unique(want_i)) == {0, 1}, op.name          # both bounds, so the test bites
    assert fired >= 3


def test_gemm_across_the_ridge_on_random_coefficients():
    """Seeded random GEMMs (coefficients over 12 decades, either bound or both in range): whenever
    the shortcut answers, its answer is the stacked max/argmax bit for bit; it answers most of them."""
    ex = _exec()
    rng = np.random.default_rng(7)
    x = np.linspace(1.0, 1e6, 4096).reshape(64, 64)
    answered = _random_gemms_answered(
        ex, rng, lambda: (_coefficients(rng), x * rng.uniform(0.5, 2.0)),
        lambda op, ex: pc._gemm_across_ridge(op, ex, pc._ends(op.x)))
    assert answered >= 250


def test_gemm_across_the_ridge_declines_what_it_cannot_show():
    """Declined (None, the plain path): an operator that is not a GEMM, L2 re-reads or communication
    of its own, a negative or -0.0 coefficient, a range that reaches 0 tokens, terms whose squares
    would underflow (10⁻¹⁸⁰ s: the square is 0 and √ would not give the larger term back) or
    overflow, an infinite end."""
    ex = _exec()
    x = np.linspace(1.0, 1e6, 4096).reshape(64, 64)
    ends = pc._ends(x)

    def gemm(**kw):
        args = dict(f1=2e8, h0=2e8, h1=4096.0)
        args.update(kw)
        return AffineOp("g", "matrix", 1, x, **args)

    assert pc._gemm_across_ridge(gemm(), ex, ends) is not None
    assert pc._gemm_across_ridge(AffineOp("v", "vector", 1, x, f1=2e8, h0=2e8, h1=4096.0), ex, ends) is None
    op = gemm()
    op.l2_bytes = 1.0
    assert pc._gemm_across_ridge(op, ex, ends) is None
    op = gemm()
    op.comm_s = 1e-6
    assert pc._gemm_across_ridge(op, ex, ends) is None
    assert pc._gemm_across_ridge(gemm(h1=-1.0), ex, ends) is None
    assert pc._gemm_across_ridge(gemm(h0=-0.0), ex, ends) is None
    zero = x - 1.0                                     # the range starts at 0 tokens
    assert pc._gemm_across_ridge(AffineOp("g", "matrix", 1, zero, f1=2e8, h0=0.0, h1=4096.0), ex,
                                 pc._ends(zero)) is None
    tiny = gemm(f1=1e-180, h0=0.0, h1=1e-180)         # m ≈ 1e-180 / 1.8e12 s: its square underflows
    assert pc._gemm_across_ridge(tiny, ex, ends) is None
    huge = gemm(f1=1e300, h0=0.0, h1=1e300)           # c ≈ 1e306 / 2.9e14 s: its square overflows
    assert pc._gemm_across_ridge(huge, ex, ends) is None
    inf = x.copy()
    inf[0, 0] = math.inf
    assert pc._gemm_across_ridge(AffineOp("g", "matrix", 1, inf, f1=2e8, h0=2e8, h1=4096.0), ex,
                                 pc._ends(inf)) is None


@pytest.mark.parametrize("setup", [
    dict(model="llama-68m", hardware="a100-80gb"),
    dict(model="llama-2-7b", hardware="a100-80gb", weight_dtype="int8"),
    dict(model="mixtral-8x7b", hardware="h100-sxm", n_devices=2),
])
def test_passes_with_the_shortcuts_equal_the_reference(setup):
    """Whole passes over a sweep chunk's grid (prefill, decode, a verification of 33 tokens) equal
    the reference pass in time, work and every bound's share, bit for bit."""
    ex = _exec(**setup)
    for sh in (prefill_shape(B, P), decode_shape(B, 1.0, P + 64.0), decode_shape(B, 33.0, P + 64.0)):
        with operator_rows(False):
            got = pc.pass_cost(sh, ex)
        assert_pass_equals_reference(got, reference_pass_cost(sh, ex))


# ------------------------------------------------ attention with bounded FLOPs per byte (tree drafts)

def _tree_ctx(**kw):
    import importlib
    from costmodel.engine.evaluate import _execs, make_ctx
    rec = parse_record(dict(dict(model="llama-2-7b-32k", hardware="a100-80gb", strategy="tree", draft_model="llama-68m",
                                 acceptance_rate=0.7, tree_nodes=32, tree_depth=5, gen_len=128, batch_size=1,
                                 prompt_len=16), **kw))
    ex, draft = _execs(rec)
    trm = importlib.import_module("costmodel.engine.strategies.tree")
    ctx = make_ctx(rec, ex, dict(batch_size=B, prompt_len=P))
    return trm, ctx, draft, trm.build_tree(ctx)


def test_draft_attention_flops_per_byte_bound_by_hand():
    """llama-68m (12 heads of 64, 12 KV heads, fp16 KV): KV bytes per token and layer 2·12·64·2 = 3,072,
    attention FLOPs per pair 4·12·64 = 3,072, so the FLOPs-per-byte bound is ρ itself. A draft pass
    over n_d = 4 tokens per sequence at depth d = 2 with contexts L >= 80 reads at most
    4·(1 + 2/80) = 4.1 pairs per KV token: bound 4.1 FLOPs per byte, far below an A100's ridge
    (312e12 · 0.84 / (2.039e12 · 0.88) ≈ 146 FLOP/B)."""
    from costmodel.engine.ops import PassShape
    ex = _exec()
    t = B * 4.0
    L = P + 64.0                                     # 80 .. 16,064
    sh = PassShape(tokens=t, pairs=t * (L + 2.0), kv_hbm_tokens=B * L, lm_tokens=t, max_pairs_per_kv_token=4.1)
    att = [op for op in layer_ops(sh, ex) if op.name == "attention"][0]
    assert att.max_flops_per_byte == pytest.approx(4.1, rel=1e-15)
    assert np.all(att.flops / att.hbm_bytes <= 4.1)  # the bound holds element by element
    got = pc._memory_bound(att, ex, pc._l2_not_slower(ex))
    want_t, want_i = _ref_op_time(att, ex)
    assert got is not None and _bits_equal(got[0], want_t) and np.all(want_i == 1) and int(got[1]) == 1


def test_memory_bound_declines_what_it_cannot_show():
    """No bound, a bound at or above the ridge (the compute term could bind), L2 re-reads, link time or
    dequantisation FLOPs: None (the terms are compared element by element)."""
    from costmodel.engine.ops import Op
    ex = _exec()
    hbm = np.linspace(1e6, 1e9, 4096)
    ridge = float(ex.matrix_flops_per_s) / float(ex.hbm_bytes_per_s)

    def att(**kw):
        args = dict(flops=hbm * 2.0, hbm_bytes=hbm, max_flops_per_byte=2.0)
        args.update(kw)
        return Op("attention", "attention", 1, **args)

    ok = pc._l2_not_slower(ex)
    assert pc._memory_bound(att(), ex, ok) is not None
    assert pc._memory_bound(att(max_flops_per_byte=None), ex, ok) is None
    assert pc._memory_bound(att(max_flops_per_byte=ridge), ex, ok) is None
    assert pc._memory_bound(att(l2_bytes=hbm), ex, ok) is None
    assert pc._memory_bound(att(comm_s=1e-6), ex, ok) is None
    assert pc._memory_bound(att(dequant_flops=1e6), ex, ok) is None
    assert pc._memory_bound(att(), ex, False) is None


def test_tree_draft_passes_equal_the_reference_pass_by_pass(monkeypatch):
    """The stacked draft passes of a tree over a sweep chunk (memory-bound attention shown from the
    bound, work totals summed one pass at a time) equal the reference: each pass priced alone by
    roofline.reference_pass_cost and added from +0.0 in pass order, time, work and every bound."""
    from costmodel.engine.roofline import Cost
    trm, ctx, draft, tr = _tree_ctx()
    shown = []
    real = pc._memory_bound
    monkeypatch.setattr(pc, "_memory_bound", lambda *a: shown.append(real(*a)) or shown[-1])
    with operator_rows(False):
        got = trm.draft_levels_cost(ctx, draft, tr, "model")
    assert len(shown) == 1 and shown[0] is not None         # the shortcut settled the draft's attention
    Ld = ctx.L
    want = Cost.zero()
    for d, n_d in enumerate(trm.draft_pass_tokens(tr)):
        t = ctx.B * n_d
        from costmodel.engine.ops import PassShape
        want = want + reference_pass_cost(PassShape(tokens=t, pairs=t * (Ld + d), kv_hbm_tokens=ctx.B * Ld,
                                                    lm_tokens=t), draft)
    shape = np.shape(want.time_s)
    for f in ("time_s", "flops", "hbm_bytes"):
        assert _bits_equal(np.broadcast_to(getattr(got, f), shape), getattr(want, f)), f
    for b in want.by_bound:
        assert _bits_equal(np.broadcast_to(got.by_bound[b], shape), np.broadcast_to(want.by_bound[b], shape)), b


def test_work_summed_over_passes_equals_the_stacked_sum():
    """work_summed_over_passes (pass by pass) equals summing the stacked totals over the passes, bit
    for bit; it declines once the stacked totals were read, and for a pass without the leading axis."""
    from costmodel.engine.ops import PassShape
    from costmodel.engine.roofline import Cost
    from costmodel.fast.arrays import add_all
    ex = _exec()
    n = np.array([1.0, 4.0, 9.0, 7.0, 3.0]).reshape(5, 1, 1)
    d = np.arange(5.0).reshape(5, 1, 1)
    L = P + 64.0
    sh = PassShape(tokens=B * n, pairs=B * n * (L + d), kv_hbm_tokens=B * L, lm_tokens=B * n)
    zero = Cost.zero().time_s
    with operator_rows(False):
        cost = pc.pass_cost(sh, ex)
        fl, hb = pc.work_summed_over_passes(cost, 5, zero)
        assert pc.work_summed_over_passes(cost, 5, zero) is not None           # nothing read yet
        want_f = add_all(zero, (cost.flops[i] for i in range(5)))
        want_h = add_all(zero, (cost.hbm_bytes[i] for i in range(5)))
        assert _bits_equal(fl, want_f) and _bits_equal(hb, want_h)
        assert pc.work_summed_over_passes(cost, 5, zero) is None               # totals read: declined
        assert pc.work_summed_over_passes(pc.pass_cost(sh, ex), 4, zero) is None


def test_pairs_per_kv_token_bound_by_hand():
    """ρ = max lead + max tail / min L for pairs = B·(lead·L + tail) over B·L KV tokens read:
    a decode of 1 token at L >= 80: 1 + 1/80 = 1.0125; a tree verification of q = 33 tokens
    (dense mask: tail q² = 1,089) at L >= 80: 33 + 1,089/80 = 46.6125; a draft pass over
    n = (1, 4, 9) tokens at depths d = (0, 1, 2), tail n·d = (0, 4, 18): 9 + 18/80 = 9.225. None for a
    single configuration, a batch below 1, a context below 1 or a NaN."""
    from costmodel.engine.ops import pairs_per_kv_token_bound as bound
    from costmodel.engine.strategies.common import decode_shape
    L = P + 64.0                                     # 80 .. 16,064
    assert bound(B, L, 1.0, 1.0) == pytest.approx(1.0125, rel=1e-15)
    assert decode_shape(B, 1.0, L).max_pairs_per_kv_token == pytest.approx(1.0125, rel=1e-15)
    assert bound(B, L, 33.0, 33.0 * 33.0) == pytest.approx(46.6125, rel=1e-15)
    n, d = np.array([1.0, 4.0, 9.0]).reshape(3, 1, 1), np.arange(3.0).reshape(3, 1, 1)
    assert bound(B, L, n, n * d) == pytest.approx(9.225, rel=1e-15)
    assert bound(4.0, 80.0, 1.0, 1.0) is None
    assert bound(B - 0.5, L, 1.0, 1.0) is None
    assert bound(B, L - 79.5, 1.0, 1.0) is None
    nan = L.copy()
    nan[0, 3] = np.nan
    assert bound(B, nan, 1.0, 1.0) is None
    # the bound holds element by element for the decode shape it describes
    sh = decode_shape(B, 3.0, L)
    assert np.all(sh.pairs / sh.kv_hbm_tokens <= sh.max_pairs_per_kv_token)


def _stacked_exec(devices=("a100-80gb", "h100-sxm", "t4", "l4", "mi300x"), **kw):
    """An Exec over several devices as one HardwareStack (the devices along axis 0: rates are arrays)."""
    from costmodel.inputs.hardware import load_hardware, stack_hardware
    from costmodel.inputs.record import with_fields
    rec = parse_record(dict(dict(model="llama-2-7b", hardware=devices[0]), batch_size=1, prompt_len=1, **kw))
    stack = stack_hardware([load_hardware(d) for d in devices], (len(devices), 1))
    return build_exec(with_fields(rec, hardware=stack))


@pytest.mark.parametrize("kw", [dict(), dict(weight_dtype="int4"), dict(n_devices=2)])
def test_two_terms_on_arrays_equals_the_stacked_terms(kw):
    """A decoding pass's GEMMs over stacked devices (array rates: the ridge-crossing shortcut, which
    needs scalar rates, declines them) and a batch of 1 .. 4096 sequences: the array shortcut prices
    every one, its time and bound the stacked max/argmax of the four terms element for element, and
    both bounds occur (a T4 runs out of FLOPs at a smaller batch than an MI300X)."""
    ex = _stacked_exec(**kw)
    batch = np.asarray([1.0, 2.0, 8.0, 64.0, 512.0, 4096.0]).reshape(1, -1)
    ops = [op for op in layer_ops(decode_shape(batch, 1.0, 1024.0 + batch * 0.0), ex) if op.kind == "matrix"]
    assert len(ops) >= 4
    assert assert_answers_match_reference(ops, ex, pc._two_terms_on_arrays) == {0, 1}


def test_two_terms_on_arrays_on_random_coefficients():
    """Seeded random GEMMs (coefficients over 12 decades) on stacked devices: whenever the shortcut
    answers, its answer is the stacked max/argmax bit for bit; it answers nearly all of them."""
    ex = _stacked_exec()
    rng = np.random.default_rng(11)
    answered = _random_gemms_answered(
        ex, rng, lambda: _swap(np.sort(10 ** rng.uniform(0, 6, 40)).reshape(1, -1), _coefficients(rng)),
        pc._two_terms_on_arrays)
    assert answered >= 290


def test_two_terms_on_arrays_declines_what_it_cannot_show():
    """Declined (None, the plain path): communication of its own, one configuration (scalar terms),
    a term whose square would underflow (10⁻¹⁸⁰ s) or overflow, a NaN, a negative coefficient."""
    ex = _stacked_exec()
    x = np.asarray([1.0, 16.0, 256.0]).reshape(1, -1)

    def gemm(xs=x, **kw):
        args = dict(f1=2e8, h0=2e8, h1=4096.0)
        args.update(kw)
        return AffineOp("g", "matrix", 1, xs, **args)

    assert pc._two_terms_on_arrays(gemm(), ex) is not None
    op = gemm()
    op.comm_s = 1e-6
    assert pc._two_terms_on_arrays(op, ex) is None
    assert pc._two_terms_on_arrays(gemm(xs=np.float64(16.0)), _exec()) is None    # one device, one batch: 0-d terms
    assert pc._two_terms_on_arrays(gemm(f1=1e-180, h0=0.0, h1=1e-180), ex) is None
    assert pc._two_terms_on_arrays(gemm(f1=1e300, h0=0.0, h1=1e300), ex) is None
    assert pc._two_terms_on_arrays(gemm(xs=np.asarray([[1.0, math.nan]])), ex) is None
    assert pc._two_terms_on_arrays(gemm(f1=-2e8), ex) is None


def test_two_terms_on_arrays_tie_is_compute_bound():
    """c = m in every element (FLOPs equal to bytes at a unit rate equal to the HBM rate: the same
    quotient): the time is √(2)·m and the bound compute (0), the first of equal terms, as the stacked
    argmax gives."""
    ex = _stacked_exec()
    x = np.asarray([1.0, 16.0, 256.0]).reshape(1, -1)
    op = AffineOp("g", "matrix", 1, x, f1=2e8, h0=2e8, h1=4096.0)
    op.flops = op.hbm_bytes
    op.unit_flops_per_s = ex.hbm_bytes_per_s
    t, idx = pc._two_terms_on_arrays(op, ex)
    want_t, want_i = _ref_op_time(op, ex)
    assert not np.any(want_i) and not np.any(idx)
    assert _bits_equal(t, want_t)


@pytest.mark.parametrize("kw", [dict(), dict(weight_dtype="int8"), dict(n_devices=2)])
def test_two_terms_on_arrays_other_kernels_equal_the_stacked_terms(kw):
    """A decoding pass's elementwise kernels (norms, activation, embedding) and, where it has no L2
    term, its attention, over stacked devices and a batch of 1 .. 4096: the larger of the compute
    and memory terms and its index, element for element the stacked max/argmax of the four terms."""
    from costmodel.engine.ops import Op
    ex = _stacked_exec(**kw)
    batch = np.asarray([1.0, 2.0, 8.0, 64.0, 512.0, 4096.0]).reshape(1, -1)
    ops = [op for op in layer_ops(decode_shape(batch, 1.0, 1024.0 + batch * 0.0), ex) if op.kind == "vector"]
    ops.append(Op("attn", "attention", 1, flops=np.outer(np.arange(1.0, 6.0), batch.ravel()) * 1e9,
                  hbm_bytes=np.outer(np.ones(5), batch.ravel()) * 4e6, unit_flops_per_s=ex.attention_matrix_flops_per_s))
    assert len(ops) >= 3
    assert assert_answers_match_reference(ops, ex, pc._two_terms_on_arrays) == {0, 1}


def test_two_terms_on_arrays_other_kernels_decline_and_tie():
    """An elementwise kernel with a NaN or a -0.0 term, or with link time, is declined; a tie (c = m
    in every element: FLOPs equal to bytes at a unit rate equal to the HBM rate) is bound by compute
    (0), the first of equal terms."""
    from costmodel.engine.ops import Op
    ex = _stacked_exec()
    x = np.asarray([[1.0, 16.0, 256.0]])
    assert pc._two_terms_on_arrays(Op("v", "vector", 1, flops=x, hbm_bytes=x * 8.0), ex) is not None
    assert pc._two_terms_on_arrays(Op("v", "vector", 1, flops=x, hbm_bytes=x * math.nan), ex) is None
    assert pc._two_terms_on_arrays(Op("v", "vector", 1, flops=x * -0.0, hbm_bytes=x), ex) is None
    assert pc._two_terms_on_arrays(Op("v", "vector", 1, flops=x, hbm_bytes=x, comm_s=1e-6), ex) is None
    tie = Op("a", "attention", 1, flops=x * 4e6, hbm_bytes=x * 4e6, unit_flops_per_s=ex.hbm_bytes_per_s)
    t, idx = pc._two_terms_on_arrays(tie, ex)
    want_t, want_i = _ref_op_time(tie, ex)
    assert not np.any(want_i) and not np.any(idx) and _bits_equal(t, want_t)


# ------------------------------------------------------------------ a bound's accumulator (_add_where)

def _reference_add_where(a, tc, idx, i):
    """The reference pass's accumulation: a + where(idx == i, t, 0.0)·count, with tc = t·count (where the
    mask holds the product is tc, elsewhere 0.0·count = +0.0)."""
    return (0.0 if a is None else a) + np.where(idx == i, tc, 0.0)


@pytest.mark.parametrize("a_shape, tc_shape, idx_shape", [
    ((4, 5), (4, 5), (4, 5)),         # everything grid-sized
    ((4, 5), (4, 1), (4, 1)),         # a per-batch operator added into a grid-sized sum
    ((4, 1), (4, 5), (4, 5)),         # a per-batch sum meeting a grid-sized operator
    (None, (4, 5), (4, 5)),           # the first operator of that bound
])
@pytest.mark.parametrize("owned", [True, False])
def test_add_where_is_the_reference_sum_bit_for_bit(a_shape, tc_shape, idx_shape, owned):
    rng = np.random.default_rng(7)
    a = None if a_shape is None else rng.uniform(0.0, 1.0, a_shape)
    if a is not None:
        a.flat[0] = -0.0                # -0.0 + (+0.0) is +0.0 in the reference: the sum must say so
    tc = rng.uniform(0.0, 1.0, tc_shape)
    idx = rng.integers(0, 3, idx_shape).astype(np.int8)
    idx.flat[0] = 2                   # bound 1 does not hold where a has its -0.0
    a_before = None if a is None else a.copy()
    tc_before = tc.copy()
    want = _reference_add_where(a, tc, idx, 1)
    got, got_owned = pc._add_where(a, owned, tc, idx, 1, 0, 2)
    assert got_owned and got.shape == want.shape and _bits_equal(got, want)
    assert _bits_equal(tc, tc_before)                              # the operator's time is not written
    if a is not None and not (owned and a.shape == want.shape):
        assert _bits_equal(a, a_before)                            # an array the caller does not own: kept


def test_add_where_skips_a_middle_bound_that_binds_nowhere():
    # bounds 0..2 occur (lo = 0, hi = 2); bound 1 nowhere: the sum is returned as it is, not copied
    a = np.array([1.0, 2.0])
    got, owned = pc._add_where(a, False, np.array([5.0, 6.0]), np.array([0, 2], dtype=np.int8), 1, 0, 2)
    assert got is a and owned is False
