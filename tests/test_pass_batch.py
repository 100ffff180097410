"""A pass's small affine operators priced together (costmodel.engine.pass_batch): each operator's row
is what the plain path gives it (the stacked max/argmax of its roofline terms, times its count) bit
for bit, its work is its own f1·x and h0 + h1·x, a group it cannot price is left to the plain path,
and whole passes still equal the reference pass."""

import numpy as np
import pytest

from costmodel.engine import pass_cost as pc
from costmodel.engine.ops import AffineOp, layer_ops
from costmodel.engine.pass_batch import small_op_times
from costmodel.engine.roofline import op_terms, operator_rows, reference_pass_cost, summation_order
from costmodel.engine.strategies.common import decode_shape, prefill_shape
from tests.passcheck import assert_pass_equals_reference, bits_equal as _bits_equal, exec_for as _exec


# a sweep chunk's per-batch and per-prompt arrays: 65 batch sizes, 64 prompt lengths (both below
# the 2,048 elements from which pass_cost's own shortcuts look at an operator)
B = np.arange(1.0, 66.0).reshape(-1, 1)
P = np.arange(16.0, 16 * 65.0, 16.0).reshape(1, -1)
SETUPS = [
    dict(model="llama-68m", hardware="a100-80gb"),
    dict(model="llama-2-7b", hardware="h100-sxm"),
    dict(model="llama-2-13b", hardware="t4", runtime="eager"),
    dict(model="mixtral-8x7b", hardware="h100-sxm", n_devices=2),
    dict(model="llama-2-7b", hardware="a100-80gb", weight_dtype="int8", runtime="vllm"),   # dequant FLOPs: not batched
]
SHAPES = [decode_shape(B, 1.0, 4096.0), decode_shape(B, 33.0, 600.0), prefill_shape(np.ones((1, 1)), P),
          prefill_shape(B, 16.0)]


@pytest.mark.parametrize("setup", SETUPS)
def test_each_row_is_the_operators_own_plain_answer(setup):
    """Every batched operator's (seconds·count, bound, lowest, highest) equals the stacked max/argmax
    of its own roofline terms (computed on a fresh copy of the operator) times its count, and its
    FLOPs and bytes are f1·x and h0 + h1·x bit for bit."""
    ex = _exec(**setup)
    fired = skipped = 0
    for sh in SHAPES:
        ops = layer_ops(sh, ex)
        fresh = layer_ops(sh, ex)
        got = small_op_times(ops, summation_order(ops), ex, pc._DOMINANCE_MIN_SIZE)
        skipped += sum(1 for j, op in enumerate(ops) if j not in got and type(op) is AffineOp and op.dequant_flops)
        for j, (t, idx, lo, hi) in got.items():
            op, ref = ops[j], fresh[j]
            assert type(ref) is AffineOp
            stack = np.stack(np.broadcast_arrays(*op_terms(ref, ex)))
            want_t, want_i = stack.max(axis=0) * ref.count, stack.argmax(axis=0)
            assert _bits_equal(t, want_t), op.name
            assert np.array_equal(np.broadcast_to(idx, want_i.shape), want_i), op.name
            assert (lo, hi) == (int(want_i.min()), int(want_i.max())), op.name
            assert _bits_equal(op.flops, ref.f1 * ref.x) and _bits_equal(op.hbm_bytes, ref.h0 + ref.h1 * ref.x)
            assert ref.dequant_flops == 0.0
            fired += 1
    assert fired >= 3 * len(SHAPES)            # norm, qkv, o_proj, ffn, activation, embedding, …
    if setup.get("weight_dtype") == "int8":
        assert skipped >= 3 * len(SHAPES)      # the weight-only GEMMs (dequantisation FLOPs) stay plain


@pytest.mark.parametrize("setup", SETUPS)
def test_passes_equal_the_reference(setup):
    """Whole passes over small per-batch and per-prompt arrays, their small operators batched, equal the
    reference pass in time, work and every bound's share, bit for bit."""
    ex = _exec(**setup)
    for sh in SHAPES:
        with operator_rows(False):
            got = pc.pass_cost(sh, ex)
        assert_pass_equals_reference(got, reference_pass_cost(sh, ex))


def test_three_gemms_by_hand():
    """Three GEMMs over x = 1 and 1000 tokens on an A100 (its achievable rates read from the Exec:
    ≈ 2.9e14 FLOP/s and ≈ 1.8e12 B/s): (f1, h0, h1) = (2e9, 1e3, 1e3) is compute-bound at both
    (c ≈ 6.9e-6·x s against m ≈ 1.1e-9 s at x = 1), (2, 1e9, 1e3) memory-bound at both (m ≈ 5.6e-4 s),
    (2e6, 1e6, 1e3) memory-bound at x = 1 (c ≈ 6.9e-9 against m ≈ 5.6e-7) and compute-bound at
    x = 1000 (c ≈ 6.9e-6 against m ≈ 1.1e-6). Each time is the GEMM rule √(c² + m²) times its count
    (3 for the second), bound 0 where c >= m, else 1."""
    ex = _exec()
    x = np.array([[1.0], [1000.0]])
    coef = ((2e9, 1e3, 1e3, 1), (2.0, 1e9, 1e3, 3), (2e6, 1e6, 1e3, 1))
    ops = [AffineOp(f"g{k}", "matrix", n, x, f1=f1, h0=h0, h1=h1) for k, (f1, h0, h1, n) in enumerate(coef)]
    got = small_op_times(ops, [0, 1, 2], ex, pc._DOMINANCE_MIN_SIZE)
    assert set(got) == {0, 1, 2}
    assert [g[2:] for g in (got[0], got[1], got[2])] == [(0, 0), (1, 1), (0, 1)]
    peak, bw = float(ex.matrix_flops_per_s), float(ex.hbm_bytes_per_s)
    for j, (f1, h0, h1, n) in enumerate(coef):
        for r, xv in enumerate((1.0, 1000.0)):
            c, m = f1 * xv / peak, (h0 + h1 * xv) / bw
            assert got[j][0][r, 0] == np.sqrt(c * c + m * m) * n
            assert int(np.broadcast_to(got[j][1], (2, 1))[r, 0]) == (0 if c >= m else 1)


def test_groups_it_cannot_price_are_left_to_the_plain_path():
    """A NaN token count (the plain path's reference fallback decides), dequantisation FLOPs, L2
    re-reads, link time, a single operator of its kind or work already computed: not batched."""
    ex = _exec()
    x = np.array([[1.0], [2.0]])

    def pair(**kw):
        ops = [AffineOp("a", "matrix", 1, x, f1=2e6, h0=1e6, h1=1e3), AffineOp("b", "matrix", 1, x, f1=2e6, h0=0.0, h1=1e3)]
        for k, v in kw.items():
            setattr(ops[1], k, v)
        return ops

    assert set(small_op_times(pair(), [0, 1], ex, 2048)) == {0, 1}
    nan = np.array([[1.0], [np.nan]])
    ops = [AffineOp("a", "matrix", 1, nan, f1=2e6, h0=1e6, h1=1e3), AffineOp("b", "matrix", 1, nan, f1=2.0, h0=0.0, h1=1e3)]
    assert small_op_times(ops, [0, 1], ex, 2048) == {}
    assert small_op_times(pair(dequant_flops=1e6), [0, 1], ex, 2048) == {}
    assert small_op_times(pair(l2_bytes=1.0), [0, 1], ex, 2048) == {}
    assert small_op_times(pair(comm_s=1e-6), [0, 1], ex, 2048) == {}
    assert small_op_times(pair(), [0, 1], ex, 2) == {}                # x has 2 elements: not below 2
    ops = pair()
    _ = ops[1].flops                                                   # its work computed already
    assert small_op_times(ops, [0, 1], ex, 2048) == {}
    vec = [AffineOp("a", "matrix", 1, x, f1=2e6, h0=1e6, h1=1e3), AffineOp("v", "vector", 1, x, f1=4.0, h0=0.0, h1=6.0)]
    assert small_op_times(vec, [0, 1], ex, 2048) == {}                # one of each kind
