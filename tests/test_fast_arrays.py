"""costmodel.fast.arrays against the plain numpy expressions they stand for, bit for bit."""

from __future__ import annotations

import numpy as np

from costmodel.fast.arrays import max_argmax


def _stacked(terms):
    stack = np.stack(np.broadcast_arrays(*terms))
    return stack.max(axis=0), stack.argmax(axis=0)


def _same_bits(a, b):
    a, b = np.ascontiguousarray(a, dtype=float), np.ascontiguousarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def _check(terms, **kw):
    """max_argmax(terms) is the stacked max/argmax, or None; a term that is not the caller's own
    (``new_terms``) is never written."""
    before = [np.array(t, copy=True) for t in terms]
    got = max_argmax(terms, **kw)
    for k, (t, b) in enumerate(zip(terms, before)):
        assert k in kw.get("new_terms", ()) or _same_bits(t, b)
    if got is None:
        return None
    want_m, want_i = _stacked(before)
    m, i = got
    assert _same_bits(np.broadcast_to(m, want_m.shape), want_m)
    assert np.array_equal(np.broadcast_to(i, want_i.shape), want_i)
    return got


def test_a_term_above_the_running_max_everywhere_is_the_max_and_its_index_a_scalar():
    # memory term 2·compute + 1 > compute in every element: the max is the memory term itself and
    # the argmax 1 everywhere (as np.argmax of the stack: 1, since 2c + 1 > c for c >= 0)
    c = np.linspace(0.0, 5.0, 12).reshape(3, 4)
    m = 2.0 * c + 1.0
    got = _check((c, m, np.float64(0.0), np.float64(0.0)), new_terms=(0, 1))
    assert got[1].ndim == 0 and int(got[1]) == 1
    assert got[0] is m                    # the caller's own array, not a copy
    # not the caller's array: the same values, in a new array (or, when only the index is read, m itself)
    got = _check((c, m, np.float64(0.0), np.float64(0.0)))
    assert got[0] is not m
    got = _check((c, m, np.float64(0.0), np.float64(0.0)), max_wanted=False)
    assert int(got[1]) == 1


def test_the_shortcut_does_not_fire_on_ties_nan_or_broadcast_terms():
    c = np.array([[1.0, 2.0, 3.0]])
    # a tie in one element: argmax keeps 0 there (np.argmax takes the first maximum)
    got = _check((c, np.array([[2.0, 2.0, 4.0]]), np.float64(0.0)), new_terms=(0, 1))
    assert list(np.broadcast_to(got[1], (1, 3))[0]) == [1, 0, 1]
    # a NaN compares false: the plain path, which refuses a NaN running maximum (None)
    assert _check((c, np.array([[2.0, np.nan, 4.0]])), new_terms=(0, 1)) is None
    # a term that broadcasts (shape (1, 1)) above a (2, 3) running max: the max has the full shape
    big = np.arange(6.0).reshape(2, 3)
    got = _check((big, np.array([[10.0]])), new_terms=(0, 1))
    assert np.shape(got[0]) == (2, 3)


def _random_terms(rng, rows_hi: int, cols_hi: int, count_lo: int, makers):
    """(shape, terms): a random 2-D shape and 1..5 terms, each made by a maker picked at random
    (``maker(rng, shape)``)."""
    shape = (int(rng.integers(1, rows_hi)), int(rng.integers(1, cols_hi)))
    return shape, [makers[rng.integers(0, len(makers))](rng, shape) for _ in range(int(rng.integers(count_lo, 6)))]


def test_random_terms_agree_with_the_stack():
    rng = np.random.default_rng(5)
    makers = (lambda r, s: np.float64(0.0),
              lambda r, s: r.uniform(0, 10, s) + 20.0 * r.integers(0, 2),
              lambda r, s: r.uniform(0, 10, (s[0], 1)),
              lambda r, s: np.float64(r.uniform(0, 10)))
    for _ in range(300):
        shape, terms = _random_terms(rng, 5, 6, 2, makers)
        if all(np.ndim(t) == 0 for t in terms):
            continue
        own = tuple(i for i, t in enumerate(terms) if type(t) is np.ndarray and rng.integers(0, 2))
        _check(tuple(terms), new_terms=own)


def test_empty_aligned_starts_large_arrays_on_a_huge_page():
    from costmodel.fast.arrays import HUGE_PAGE_BYTES, empty_aligned
    # 1000 x 1000 float64 = 8,000,000 bytes >= 4 MiB: on a 2 MiB boundary, C-contiguous, writable
    a = empty_aligned((1000, 1000))
    assert a.shape == (1000, 1000) and a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable
    assert a.ctypes.data % HUGE_PAGE_BYTES == 0
    a.fill(1.5)
    assert float(a.sum()) == 1.5e6
    b = empty_aligned((600, 1000), dtype=bool)       # 600,000 bytes < 4 MiB: a plain np.empty
    assert b.shape == (600, 1000) and b.dtype == bool and b.base is None
    c = empty_aligned((1000, 1000), dtype=object)   # object arrays: numpy's own (None-filled)
    assert c[0, 0] is None


def test_add_all_is_the_left_to_right_sum_and_writes_no_term():
    from costmodel.fast.arrays import add_all
    rng = np.random.default_rng(9)
    makers = (lambda r, s: np.float64(r.choice([0.0, -0.0, 2.5])),
              lambda r, s: r.choice([0.0, -0.0, 1.0, np.nan, np.inf, 1e300], size=s),
              lambda r, s: np.broadcast_to(r.uniform(-1, 1, (s[0], 1)), s),
              lambda r, s: r.uniform(-1, 1, (1, s[1])),
              lambda r, s: np.asarray(0.0))
    for _ in range(300):
        shape, terms = _random_terms(rng, 4, 5, 1, makers)
        before = [np.array(t, copy=True) for t in terms]
        want = np.asarray(0.0)
        for t in before:
            want = want + t                      # the plain left-to-right sum
        with np.errstate(all="ignore"):
            got = add_all(np.asarray(0.0), terms)
        assert _same_bits(np.broadcast_to(got, np.shape(want)), want)
        for t, b in zip(terms, before):
            assert _same_bits(t, b)


def test_affine_work_arrays_afresh_or_kept():
    """AffineOp.work_array: a new array (the caller's own) until the property is read, then the
    kept one; both the same bits as f1·x and h0 + h1·x."""
    from costmodel.engine.ops import AffineOp
    x = np.linspace(1.0, 4096.0, 4096).reshape(64, 64)
    op = AffineOp("gemm", "matrix", 32, x, f1=2.0 * 4096 * 4096, h0=4096 * 4096 * 2.0, h1=(4096 + 4096) * 2.0)
    f, own = op.work_array("flops")
    assert own and _same_bits(f, 2.0 * 4096 * 4096 * x)
    f[...] = 0.0                                    # the caller's own: writing it changes nothing kept
    h, own = op.work_array("hbm_bytes")
    assert own and _same_bits(h, 4096 * 4096 * 2.0 + (4096 + 4096) * 2.0 * x)
    assert _same_bits(op.flops, 2.0 * 4096 * 4096 * x)
    kept, own = op.work_array("flops")
    assert kept is op.flops and not own


def test_add_into_writes_only_arrays_it_was_given():
    from costmodel.fast.arrays import add_into
    small = np.array([[1.0], [-0.0]])
    x = np.array([[0.5, 2.0, np.nan], [-0.0, 3.0, 1e308]])
    want = small + x
    keep = x.copy()
    got, own = add_into(small, False, x)                 # neither is ours: a new array
    assert own and got is not x and _same_bits(got, want) and _same_bits(x, keep)
    got, own = add_into(small, False, x, x_owned=True)   # x is ours: the sum is kept in it
    assert own and got is x and _same_bits(got, want)
    y = np.array([[1.0, 2.0, 3.0]])
    got, own = add_into(None, False, y, x_owned=True)    # None: the initial 0.0
    assert got is y and _same_bits(got, 0.0 + np.array([[1.0, 2.0, 3.0]]))


def test_broadcast_shape_is_numpys():
    import pytest
    from costmodel.fast.arrays import broadcast_shape
    cases = [((), ()), ((3,), ()), ((2, 1), (1, 5)), ((4, 1, 3), (2, 1)), ((0,), (1,)), ((1,), (0,)),
             ((5, 1, 1), (1, 7, 1), (1, 1, 2)), ((2, 3), (2, 3))]
    for shapes in cases:
        assert broadcast_shape(*shapes) == np.broadcast_shapes(*shapes)
    for shapes in [((2,), (3,)), ((0,), (3,)), ((2, 3), (3, 2))]:
        with pytest.raises(ValueError):
            np.broadcast_shapes(*shapes)
        with pytest.raises(ValueError):
            broadcast_shape(*shapes)


def test_row_buffers_size_and_restore():
    """numpy's buffer is one row of the grid (1000 prompts: 992, the largest multiple of 16 in a row;
    a row of 20,000: numpy's default 8192) within the block and as before after it; rows shorter
    than 256 and no arrays leave it alone."""
    from costmodel.fast.arrays import row_buffers
    before = np.getbufsize()
    with row_buffers({"batch_size": np.ones((65, 1)), "prompt_len": np.ones((1, 1000))}):
        assert np.getbufsize() == 992
    assert np.getbufsize() == before
    with row_buffers({"batch_size": np.ones((3, 1)), "prompt_len": np.ones((1, 20000))}):
        assert np.getbufsize() == 8192
    for arrays in ({"batch_size": np.ones((65, 1)), "prompt_len": np.ones((1, 100))}, {}, None):
        with row_buffers(arrays):
            assert np.getbufsize() == before


def test_row_buffers_change_no_element():
    """Elementwise operations against arrays broadcast along the last axis (the case the row buffer is
    for), along the first, and stacked: the same bits under the row buffer as under numpy's default."""
    from costmodel.fast.arrays import row_buffers
    rng = np.random.default_rng(3)
    b, p, s = rng.random((65, 1)) * 1e3, rng.random((1, 1000)) * 1e4, rng.random((5, 65, 1))
    grid = b * p

    def compute():
        return [b * p, grid + b, grid / b, np.maximum(grid, b * 7.0), s * (p + 2.0), grid * s, np.sqrt(grid * grid + b * b)]

    want = compute()
    with row_buffers({"batch_size": b, "prompt_len": p}):
        got = compute()
    assert all(_same_bits(g, w) for g, w in zip(got, want))
