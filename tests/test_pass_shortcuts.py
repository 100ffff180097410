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
from costmodel.engine.roofline import op_terms, operator_rows, reference_pass_cost
from costmodel.engine.strategies.common import decode_shape, prefill_shape
from costmodel.inputs.record import parse_record


def _exec(**kw):
    return build_exec(parse_record(dict(dict(model="llama-68m", hardware="a100-80gb"), batch_size=1, prompt_len=1,
                                        **kw)))


def _ref_op_time(op, ex):
    stack = np.stack(np.broadcast_arrays(*op_terms(op, ex)))
    return stack.max(axis=0), stack.argmax(axis=0)


def _bits_equal(a, b):
    a, b = np.ascontiguousarray(a, dtype=float), np.ascontiguousarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


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
    answered = 0
    for _ in range(300):
        f1, h0, h1 = 10 ** rng.uniform(0, 12), 10 ** rng.uniform(0, 12) * rng.integers(0, 2), 10 ** rng.uniform(-3, 6)
        xs = x * rng.uniform(0.5, 2.0)
        op = AffineOp("r", "matrix", 1, xs, f1=f1, h0=h0, h1=h1, dequant_flops=float(rng.integers(0, 2)) * 1e6)
        got = pc._gemm_across_ridge(op, ex, pc._ends(xs))
        if got is None:
            continue
        answered += 1
        want_t, want_i = _ref_op_time(op, ex)
        assert _bits_equal(got[0], want_t) and np.array_equal(np.broadcast_to(got[1], want_i.shape), want_i)
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
        want = reference_pass_cost(sh, ex)
        for f in ("time_s", "flops", "hbm_bytes"):
            assert _bits_equal(getattr(got, f), getattr(want, f)), f
        for b in want.by_bound:
            assert _bits_equal(np.broadcast_to(got.by_bound[b], np.shape(want.time_s)),
                               np.broadcast_to(want.by_bound[b], np.shape(want.time_s))), b
