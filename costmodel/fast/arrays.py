"""Array arithmetic with fewer full-size passes, for the engine's cost sums (no physics here).

Every function returns the same elements, bit for bit, as the plain numpy expression it names
(``a + b``, ``np.stack(terms).max(0)`` ...); it only avoids materialising broadcast operands,
adding +0.0, or stacking. The engine's pass evaluator (:mod:`costmodel.engine.pass_cost`) and
:class:`costmodel.engine.roofline.Cost` use them; tests/test_sweep.py checks the results against
the plain reference pass.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

_INF_BITS = int(np.array(np.inf).view(np.uint64))

#: a transparent huge page (x86-64, arm64 with 4 KiB base pages)
HUGE_PAGE_BYTES = 1 << 21
#: arrays at least this large are placed on a huge-page boundary by :func:`empty_aligned`
_ALIGN_FROM_BYTES = 2 * HUGE_PAGE_BYTES


def broadcast_shape(*shapes) -> tuple:
    """np.broadcast_shapes(*shapes) for shape tuples, in Python (numpy's builds an iterator over
    empty arrays: several microseconds, called a hundred times per sweep chunk)."""
    out = shapes[0]
    for s in shapes[1:]:
        if s == out:
            continue
        n = max(len(s), len(out))
        a, b = (1,) * (n - len(out)) + tuple(out), (1,) * (n - len(s)) + tuple(s)
        dims = []
        for x, y in zip(a, b):
            if x != y and x != 1 and y != 1:
                raise ValueError(f"shapes {shapes} cannot be broadcast together")
            dims.append(y if x == 1 else x)
        out = tuple(dims)
    return tuple(out)


def empty_aligned(shape, dtype=float) -> np.ndarray:
    """np.empty(shape, dtype) whose data starts on a 2 MiB boundary when it spans at least 4 MiB.

    numpy asks the kernel for transparent huge pages on arrays of 4 MiB or more (madvise), but a
    block that malloc places at an arbitrary 4 KiB offset keeps 4 KiB pages in its unaligned head
    and tail: about 2 MiB of them per array, ~500 page faults on first write (an 8 MB sweep
    column). Aligned, the array takes one fault per 2 MiB. The result is a view of a slightly
    larger buffer (up to 4 MiB more address space, never touched). Object arrays are left to
    numpy (it fills them itself)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if n < _ALIGN_FROM_BYTES or dt.hasobject:
        return np.empty(shape, dtype=dt)
    raw = np.empty(n + 2 * HUGE_PAGE_BYTES, dtype=np.uint8)
    off = (-raw.ctypes.data) % HUGE_PAGE_BYTES
    return raw[off:off + n].view(dt).reshape(shape)


def bcast(a, shape):
    """np.broadcast_to(np.asarray(a, dtype=float), shape), skipped when ``a`` has that shape."""
    a = np.asarray(a, dtype=float)
    return a if a.shape == shape else np.broadcast_to(a, shape)


def add(a, b):
    """a + b for Cost arithmetic (see _binary)."""
    return _binary(np.add, a, b)


def multiply(a, b):
    """a * b for Cost arithmetic (see _binary)."""
    return _binary(np.multiply, a, b)


def add_all(total, values):
    """((total + v0) + v1) + ... left to right, each addition equal to :func:`add`; once the running
    sum is an array of its own (a new array of the final shape), the rest are added into it in
    place, so a long sum allocates one array instead of one per term."""
    own = False
    for v in values:
        if own and type(v) is not np.ndarray or own and broadcast_shape(total.shape, v.shape) == total.shape:
            np.add(total, v, out=total)
            continue
        r = add(total, v)
        own = (type(r) is np.ndarray and r.ndim > 0 and r.base is None and r is not total and r is not v)
        total = r
    return total


def _binary(ufunc, a, b):
    """ufunc(a, b) with the same elements, fewer full-size passes:

    * an operand that is a broadcast view (zero strides, e.g. a bound with no time) is used in
      its compact form and the result broadcast back: every element is one of the compact results;
    * a + (+0.0 everywhere) is ``a`` itself when ``a`` holds no -0.0 and no NaN (x + +0.0 == x
      bit for bit for every other x), checked in one read of ``a``. (The result may then be an
      operand itself: Cost arrays are never written in place once a pass has returned them.)"""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or not (a.ndim or b.ndim):
        return ufunc(a, b)           # scalars (a single evaluate()): nothing to save
    ca, cb = compact(a), compact(b)
    if ufunc is np.add:
        for x, cz in ((a, cb), (b, ca)):
            if cz.size == 1 and cz.ndim <= x.ndim and x.ndim and 0 not in x.strides and plus_zero(cz.reshape(-1)[0]) \
                    and x.shape == broadcast_shape(a.shape, b.shape) and nonneg(x):
                return x
    if ca is a and cb is b:
        return ufunc(a, b)
    shape = broadcast_shape(a.shape, b.shape)
    r = ufunc(ca, cb)
    return r if r.shape == shape else np.broadcast_to(r, shape)


def plus_zero(v) -> bool:
    """``v`` is one number, +0.0 (not -0.0, NaN or an array)."""
    return np.ndim(v) == 0 and float(v) == 0.0 and math.copysign(1.0, float(v)) > 0.0




def compact(a: np.ndarray) -> np.ndarray:
    """A broadcast view (zero strides) as the smallest view that broadcasts back to it."""
    if a.ndim == 0 or 0 not in a.strides or a.size == 0:
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]


def compact_as(a, shape) -> np.ndarray:
    """compact(bcast(a, shape)) without building the broadcast view: ``a`` as float, left-padded with
    unit dimensions to ``shape``'s length, each zero-stride dimension cut to one element (the same
    shape and elements as the compacted broadcast; ``a`` must broadcast to ``shape``)."""
    a = np.asarray(a, dtype=float)
    if a.shape != shape:
        k = len(shape) - a.ndim
        if k < 0 or any(x != y and x != 1 for x, y in zip(a.shape, shape[k:])):
            return compact(bcast(a, shape))        # does not broadcast: bcast raises
        if k:
            a = a[(None,) * k]
    return compact(a)


def max_argmax(terms, new_terms: tuple = (), max_wanted: bool = True):
    """(max, first argmax) over ``terms`` elementwise, equal to np.stack(...).max(0) / .argmax(0)
    of the broadcast terms, without materialising the stack; the argmax may have a smaller shape
    that broadcasts to the max's (a scalar where one term is the maximum everywhere). None (the
    caller takes the reference path) when the running maximum holds a NaN, a negative number or
    -0.0 where it matters. For such terms the first maximum is the last term that is strictly
    greater than the running maximum, and a +0.0 term can be skipped (it is never above a running
    maximum >= +0.0, and max(m, +0.0) = m). A term strictly greater than the running maximum
    everywhere (no NaN on either side: every comparison held) is the new maximum as it is, and
    its index the argmax everywhere so far, when that term is the caller's own new array
    (``new_terms``: their indices), which the result may be or
    overwrite, or when the caller reads only the argmax (``max_wanted`` False: the max returned
    may then be one of the terms itself). The max is otherwise a new array or the first term."""
    if not any(t.ndim for t in terms):
        fl = [float(t) for t in terms]
        for x in fl:
            if not x > 0.0 and (x != 0.0 or math.copysign(1.0, x) < 0.0):
                return None           # NaN, negative or -0.0: the reference path
        m = max(fl)
        return np.float64(m), np.intp(fl.index(m))
    m, idx, checked = terms[0], None, None
    m_new = 0 in new_terms and type(m) is np.ndarray     # m may be overwritten
    low = None                                          # (m, min of m) once computed
    for i in range(1, len(terms)):
        t = terms[i]
        if plus_zero(t):
            if checked is not m:
                if not nonneg(m):
                    return None
                checked = m
            continue
        if 8 * t.size <= m.size:
            # a small term (a constant launch time, say) that nowhere exceeds the running maximum
            # changes neither the maximum (np.maximum keeps m where t <= m) nor the index (t > m is
            # false everywhere): two reductions instead of three full passes. A NaN fails the test.
            if low is None or low[0] is not m:
                low = (m, float(m.min()))
            if float(t.max()) <= low[1]:
                continue
        gt = t > m
        if (not max_wanted or i in new_terms) and type(t) is np.ndarray and gt.shape == t.shape and gt.ndim \
                and gt.all():
            # t > m in every element: max(m, t) is t, and i the first argmax everywhere
            m, m_new, idx = t, i in new_terms, np.int8(i)
            continue
        if m_new and m.ndim and gt.shape == m.shape:
            m = np.maximum(m, t, out=m)
        else:
            m, m_new = np.maximum(m, t), True
        # (i = 1: the comparison's own bytes read as int8, the same 0s and 1s as multiplying by 1)
        step = (gt.view(np.int8) if i == 1 else gt.view(np.int8) * np.int8(i)) if gt.ndim else np.int8(i if gt else 0)
        idx = step if idx is None else np.maximum(idx, step)
    if checked is not m and not nonneg(m):
        return None
    if idx is None:
        idx = np.zeros(np.shape(m), dtype=np.int8)
    return m, idx


def nonneg(a: np.ndarray) -> bool:
    """Every element is +0.0 .. +inf (no negative number, no -0.0, no NaN): read as uint64 the bit
    pattern is at most +inf's (a set sign bit or a NaN reads larger)."""
    if a.ndim == 0:
        x = float(a)
        return x >= 0.0 and math.copysign(1.0, x) > 0
    if a.dtype != np.float64:
        return False
    return bool(a.view(np.uint64).max() <= _INF_BITS)


def add_into(acc, owned: bool, x, x_owned: bool = False):
    """(acc + x, owned): in place when acc is the caller's own array of the result's shape, or else
    into x when ``x_owned`` (x is the caller's own new array, of the result's shape); acc None
    stands for the initial 0.0."""
    if acc is None:
        if x_owned and type(x) is np.ndarray and x.ndim and x.dtype == np.float64:
            return np.add(0.0, x, out=x), True
        return 0.0 + x, True
    if owned and type(acc) is np.ndarray and acc.ndim:
        xs, sh = np.shape(x), acc.shape
        if xs == sh or (len(xs) <= len(sh) and all(a == 1 or a == b for a, b in zip(xs[::-1], sh[::-1]))):
            return np.add(acc, x, out=acc), True
    if x_owned and type(x) is np.ndarray and x.ndim and x.dtype == np.float64 and \
            broadcast_shape(np.shape(acc), x.shape) == x.shape:
        return np.add(acc, x, out=x), True
    return acc + x, True


def times_broadcast(a, owned: bool, k, shp):
    """np.broadcast_to(a * k, shp).astype(float), without copies when ``a`` is already ours."""
    a = a * k if np.ndim(k) or k != 1 else a
    if owned and np.shape(a) == shp and isinstance(a, (np.ndarray, np.float64)) and a.dtype == np.float64:
        return a
    return np.broadcast_to(a, shp).astype(float)


#: numpy's default ufunc buffer (elements); a row-sized buffer is used below it (row_buffers)
_DEFAULT_BUFSIZE = 8192
#: rows shorter than this keep numpy's default buffer (their broadcast copies are cheap)
_ROW_BUFFER_MIN = 256


@contextlib.contextmanager
def row_buffers(arrays):
    """Within the block, numpy's ufunc buffer holds at most one row of the broadcast grid of
    ``arrays`` (its last axis, rounded down to a multiple of 16: ``np.setbufsize``), then as before.

    An elementwise operation between a grid array and an array broadcast along the last axis (a
    per-batch (n, 1) array against (n, m)) cannot walk the broadcast operand with one stride across
    a buffer that spans several rows, so numpy copies it into the buffer, row by row: about as much
    work again as the operation itself. With a buffer no longer than a row the operand is read in
    place (stride 0 within the row). The elements computed are the same: the buffer decides only
    how the loop is cut, never an operation or its order (elementwise ufuncs)."""
    rows = [np.shape(a)[-1] for a in arrays.values() if np.ndim(a)] if arrays else []
    size = min(_DEFAULT_BUFSIZE, 16 * (max(rows) // 16)) if rows else 0
    if size < _ROW_BUFFER_MIN or size == np.getbufsize():
        yield
        return
    old = np.setbufsize(size)
    try:
        yield
    finally:
        np.setbufsize(old)
