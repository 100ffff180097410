"""The pass evaluator: :func:`pass_cost`, what every strategy calls to price a forward pass.

Nothing here defines physics: the roofline terms are :func:`costmodel.engine.roofline.op_terms` and the
pass is :func:`costmodel.engine.roofline.reference_pass_cost`. This module computes the same thing with
the same floating-point operations in the same order (so results are bit-identical) but fewer
array passes: a scalar path in Python floats for single configurations, in-place accumulation,
skipped +0.0 contributions and max/argmax without stacking for arrays; an affine operator
(:class:`costmodel.engine.ops.AffineOp`, a GEMM or an elementwise kernel) whose binding term wins by a
margin at both ends of its tokens' range gets that term alone (:func:`_dominant_term`), a GEMM
whose binding term changes inside the range gets √(c² + m²) without comparing the terms
(:func:`_gemm_across_ridge`; for array rates :func:`_two_terms_on_arrays`, also the larger of two
terms of other kernels), an operator with FLOPs per byte bounded below the ridge (attention, from
its pass's pairs per KV token) gets its memory term alone (:func:`_memory_bound`);
a small term that nowhere exceeds the running maximum is skipped after two reductions; a pass
whose host time is below its device time everywhere skips the zero wait; the work totals of
passes stacked along a leading axis are summed one pass at a time
(:func:`work_summed_over_passes`). Any NaN, negative or -0.0 term falls back to the plain numpy
path. tests/test_sweep.py and tests/test_pass_shortcuts.py check it against the reference.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.fast.arrays import add_into, bcast, broadcast_shape, max_argmax, nonneg, plus_zero, times_broadcast

from costmodel.engine.execution import Exec
from costmodel.engine.ops import AffineOp, PassShape, kernel_count, layer_ops
from costmodel.engine.pass_batch import small_op_times
from costmodel.engine.roofline import BOUNDS, Cost, DeferredWork, OP_BOUND_NAMES, RECORD_OPS, as_dequant, compute_term_s, \
    gemm_time_s, l2_term_s, memory_term_s, op_terms, roofline_terms, summation_order, unit_flops_per_s


_ZERO = np.float64(0.0)


def _l2_not_slower(ex: Exec) -> bool:
    """L2 bandwidth >= achievable HBM bandwidth > 0 everywhere (rates may be arrays)."""
    l2, bw = ex.hw.l2_bandwidth_bytes_per_s, ex.hbm_bytes_per_s
    return bool(np.all(np.asarray(bw) > 0) and np.all(np.asarray(l2) >= np.asarray(bw)))


def _op_time(op, ex: Exec, l2_not_slower=None):
    """op_time with the bound index possibly compact (int8, broadcasting to the time's shape);
    an array time is a new array (callers may write into it). ``l2_not_slower``: _l2_not_slower(ex),
    when the caller has it (it depends on ``ex`` only)."""
    l2 = op.l2_bytes
    if plus_zero(l2) and (_l2_not_slower(ex) if l2_not_slower is None else l2_not_slower):
        # no L2 re-reads: the l2 term (hbm + 0)/l2_bw is at most the memory term hbm/hbm_bw (division
        # is monotonic in the divisor), so it never raises the maximum nor is strictly above it; a
        # +0.0 in its place changes neither (_max_argmax checks the running maximum is >= +0.0)
        if op.kind != "comm":
            got = _two_terms_on_arrays(op, ex)
            if got is not None:
                return got
        a, b, _c, d = op_terms(op, ex, with_l2=False)
        fast = max_argmax((a, b, _ZERO, d), new_terms=(0, 1))
    else:
        fast = max_argmax(op_terms(op, ex), new_terms=(0, 1, 2))
    if fast is not None:
        return fast
    stack = np.stack(np.broadcast_arrays(*op_terms(op, ex)))   # afresh: the first may be overwritten
    return stack.max(axis=0), stack.argmax(axis=0)


def _two_terms_on_arrays(op, ex: Exec):
    """_op_time's answer from the compute and memory terms c, m of an operator with array terms (rates
    may be arrays), no link time and no L2 term that can bind (the caller's test), or None. A GEMM:
    (√(c² + m²), 1 where c < m) when c >= 0 and c, m in [_SQUARE_SAFE_S, 1/_SQUARE_SAFE_S] (the
    argument of _gemm_across_ridge on four reductions); another kernel: (max(c, m), 1 where m > c)
    when c, m are +0.0 .. +inf (ties go to c; the +0.0 link term and the l2 term <= m are no higher)."""
    cm = op.comm_s
    if not plus_zero(cm):
        return None
    c = np.asarray(compute_term_s(np.asarray(op.flops, dtype=float), as_dequant(op.dequant_flops),
                                  unit_flops_per_s(op, ex), ex.vector_flops_per_s), dtype=float)
    m = np.asarray(memory_term_s(np.asarray(op.hbm_bytes, dtype=float), ex.hbm_bytes_per_s), dtype=float)
    if not (c.ndim or m.ndim):
        return None                   # one configuration: the plain path
    if op.kind != "matrix":
        return (np.maximum(c, m), np.greater(m, c).view(np.int8)) if nonneg(c) and nonneg(m) else None
    c_lo, m_lo = float(c.min()), float(m.min())
    if not (c_lo >= 0.0 and m_lo >= _SQUARE_SAFE_S and max(float(c.max()), float(m.max())) <= 1.0 / _SQUARE_SAFE_S):
        return None                   # (a NaN fails every comparison)
    return gemm_time_s(c, m), np.less(c, m).view(np.int8)


#: relative margin by which a term must beat every other at both ends of the range (see _dominant_term)
_DOMINANCE_MARGIN = 1e-9
#: below this many elements the plain path costs less than the check's Python (small decode arrays)
_DOMINANCE_MIN_SIZE = 2048


def _ends(x):
    """(flat index of the minimum, flat index of the maximum) of an operator's array ``x``; None
    for a scalar, a small array or a NaN (argmin/argmax stop at a NaN)."""
    if type(x) is not np.ndarray or x.size < _DOMINANCE_MIN_SIZE:
        return None
    lo, hi = int(np.argmin(x)), int(np.argmax(x))
    if not (x.flat[lo] == x.flat[lo] and x.flat[hi] == x.flat[hi]):
        return None
    return lo, hi


def _dominant_term(op: AffineOp, ex: Exec, ends):
    """(seconds, bound index) of an operator whose work is affine in its array x (FLOPs f1·x,
    bytes h0 + h1·x: :class:`costmodel.engine.ops.AffineOp`) when one roofline term beats every other by
    a relative margin at both ends of x's range; else None. For a GEMM bound by compute or memory
    the time is √(c² + m²) (:func:`costmodel.engine.roofline.gemm_overlap`), both terms computed.

    Each term is affine in x, so term_k − (1 + margin)·term_j is too: positive at both ends, it is
    positive on the whole range, far above the few ulps of rounding in evaluating either term.
    Then max(terms) is term_k itself, element for element, and the first argmax is k: the result
    of :func:`_op_time`, without the other terms, the comparisons or the max. The ends are
    evaluated with the same expressions as the arrays (AffineOp), on Python floats."""
    lo, hi = ends
    vals = (op.f1, op.h0, op.h1, op.l2_bytes, op.comm_s, op.dequant_flops)
    if not all(type(v) is float or getattr(v, "ndim", 1) == 0 for v in vals):
        return None
    peak = unit_flops_per_s(op, ex)
    peak_v, bw, l2bw = ex.vector_flops_per_s, ex.hbm_bytes_per_s, ex.hw.l2_bandwidth_bytes_per_s
    if not all(type(v) is float or getattr(v, "ndim", 1) == 0 for v in (peak, peak_v, bw, l2bw)) or \
            not (peak > 0.0 and bw > 0.0 and l2bw > 0.0 and peak_v > 0.0):
        return None
    f1, h0, h1, l2, cm, dq = (float(v) for v in vals)
    k = None
    for i in (lo, hi):
        x = float(op.x.flat[i])
        h = h0 + h1 * x
        terms = (compute_term_s(f1 * x, dq, peak, peak_v), memory_term_s(h, bw), l2_term_s(h, l2, l2bw), cm)
        if not all(t >= 0.0 and t < math.inf for t in terms):
            return None
        best = max(range(4), key=terms.__getitem__)
        if k is None:
            k = best
        if best != k or not all(terms[k] > terms[j] * (1.0 + _DOMINANCE_MARGIN) for j in range(4) if j != k):
            return None
    if op.kind == "matrix":
        if k > 1:
            return None                   # an L2- or link-bound GEMM: the plain path
        # roofline.gemm_overlap: the binding term becomes gemm_time_s(c, m), the larger of c and m is
        # term k everywhere (the margin above), so that is the time and k the bound; in place (both
        # are new arrays: quotients), the same operations as the reference
        c = np.asarray(_term_new(op, "flops", compute_term_s, as_dequant(op.dequant_flops), peak, peak_v), dtype=float)
        m = _term_new(op, "hbm_bytes", memory_term_s, bw)
        if c.shape != op.x.shape or m.shape != op.x.shape:
            return None
        return gemm_time_s(c, m, out=c), np.intp(k)
    if k == 0:
        t = _term_new(op, "flops", compute_term_s, as_dequant(op.dequant_flops), peak, peak_v)
    elif k == 1:
        t = _term_new(op, "hbm_bytes", memory_term_s, bw)
    elif k == 2:
        t = l2_term_s(np.asarray(op.hbm_bytes, dtype=float), op.l2_bytes, l2bw)
    else:
        t = np.asarray(op.comm_s, dtype=float)
    t = np.asarray(t, dtype=float)
    if t.shape != op.x.shape:                  # a constant term: the reference broadcasts it
        t = np.array(np.broadcast_to(t, op.x.shape))
    elif t is op.comm_s:
        t = t.copy()
    return t, np.intp(k)


def _memory_bound(op, ex: Exec, l2_not_slower: bool):
    """(seconds, bound index 1) of an operator whose FLOPs per byte are bounded
    (:attr:`costmodel.engine.ops.Op.max_flops_per_byte` = r) below the device's ridge: with
    r·(HBM rate)·(1 + margin) < its unit's FLOP rate, the compute term FLOPs/rate <= r·bytes/rate is
    below the memory term bytes/(HBM rate) by that margin in every element (far above the few ulps
    of rounding in either), so the memory term is the maximum and 1 the first argmax; the l2 term
    is not above it (no L2 re-reads, L2 not slower) and the interconnect term is +0.0. The compute
    term is then never computed. None when that cannot be shown (dequantisation FLOPs, L2 or link
    traffic, array rates)."""
    r, l2, cm, dq = op.max_flops_per_byte, op.l2_bytes, op.comm_s, op.dequant_flops
    if type(r) is not float or not (0.0 <= r < math.inf) or not l2_not_slower:
        return None
    if not (plus_zero(l2) and plus_zero(cm) and plus_zero(dq)):
        return None
    peak, bw = unit_flops_per_s(op, ex), ex.hbm_bytes_per_s
    if np.ndim(peak) or np.ndim(bw) or not (0.0 < float(bw) < math.inf and float(peak) < math.inf) or \
            not r * float(bw) * (1.0 + _DOMINANCE_MARGIN) < float(peak):
        return None
    if broadcast_shape(np.shape(op.flops), np.shape(op.hbm_bytes)) != np.shape(op.hbm_bytes):
        return None                    # the reference's terms would broadcast to a larger shape
    t = memory_term_s(np.asarray(op.hbm_bytes, dtype=float), bw)
    return (t, np.intp(1)) if type(t) is np.ndarray and t.ndim else None


#: a GEMM's terms at the low end of its range at least this (seconds), at the high end at most
#: 1/this: their squares neither underflow nor overflow (see _gemm_across_ridge)
_SQUARE_SAFE_S = 1e-100


def _gemm_across_ridge(op: AffineOp, ex: Exec, ends):
    """(seconds, bound index) of a GEMM (an AffineOp of kind 'matrix') on the device's own memory
    (no L2 re-reads, no communication) whose binding term changes inside its range, as for a
    prefill over batch × prompt tokens: :func:`costmodel.engine.roofline.gemm_overlap` makes its
    time √(c² + m²) (``gemm_time_s``) in every element, bound by compute where c >= m, else by
    memory; None when that cannot be shown from the operator's scalars and its range's ends.

    Why that is :func:`_op_time`'s answer element for element: with c, m >= 0 and their squares
    normal numbers, h = sqrt(c·c + m·m) >= sqrt(m·m) = m and likewise >= c (IEEE rounding is
    monotonic, and sqrt(fl(m·m)) = m without underflow or overflow). Where c >= m the terms are
    (h, m): the maximum h, first at 0; where c < m they are (c, h) with h >= m > c: h, at 1. The
    l2 term (HBM bytes + 0)/L2 rate is at most m when L2 is not slower than HBM, and the
    interconnect term is +0.0: neither is strictly above h. The terms are nondecreasing in x (the
    coefficients are >= 0), so their bounds at the range's ends hold in every element."""
    if op.kind != "matrix":
        return None
    vals = (op.f1, op.h0, op.h1, op.l2_bytes, op.comm_s, op.dequant_flops)
    if not all(type(v) is float or getattr(v, "ndim", 1) == 0 for v in vals):
        return None
    f1, h0, h1, l2, cm, dq = (float(v) for v in vals)
    if not all(v >= 0.0 and math.copysign(1.0, v) > 0.0 and v < math.inf for v in (f1, h0, h1, dq)) or \
            l2 != 0.0 or cm != 0.0 or math.copysign(1.0, l2) < 0.0 or math.copysign(1.0, cm) < 0.0:
        return None
    peak = unit_flops_per_s(op, ex)
    peak_v, bw, l2bw = ex.vector_flops_per_s, ex.hbm_bytes_per_s, ex.hw.l2_bandwidth_bytes_per_s
    if not all(type(v) is float or getattr(v, "ndim", 1) == 0 for v in (peak, peak_v, bw, l2bw)):
        return None
    peak, peak_v, bw, l2bw = float(peak), float(peak_v), float(bw), float(l2bw)
    if not (0.0 < peak < math.inf and 0.0 < peak_v < math.inf and 0.0 < bw < math.inf and l2bw >= bw):
        return None
    lo, hi = (float(op.x.flat[i]) for i in ends)
    if not lo > 0.0:
        return None
    c_hi, m_lo, m_hi = compute_term_s(f1 * hi, dq, peak, peak_v), memory_term_s(h0 + h1 * lo, bw), \
        memory_term_s(h0 + h1 * hi, bw)
    if not (m_lo >= _SQUARE_SAFE_S and c_hi <= 1.0 / _SQUARE_SAFE_S and m_hi <= 1.0 / _SQUARE_SAFE_S):
        return None
    c = np.asarray(_term_new(op, "flops", compute_term_s, as_dequant(op.dequant_flops), peak, peak_v), dtype=float)
    m = np.asarray(_term_new(op, "hbm_bytes", memory_term_s, bw), dtype=float)
    if c.shape != op.x.shape or m.shape != op.x.shape:
        return None
    idx = np.less(c, m).view(np.int8)            # 1 (memory) where c < m, else 0 (compute)
    return gemm_time_s(c, m, out=c), idx


def _term_new(op: AffineOp, name: str, term, *rates):
    """term(op's ``name`` array, *rates) as a new array: computed into the operator's work array
    when that is a new one (AffineOp.work_array), which then is not kept."""
    work, own = op.work_array(name)
    work = np.asarray(work, dtype=float)
    return term(work, *rates, out=work if own and work.dtype == np.float64 else None)


def pass_cost(shape: PassShape, ex: Exec) -> Cost:
    """Cost of one forward pass of ``shape`` on ``ex`` (see module docstring).

    The arithmetic of :func:`costmodel.engine.roofline.reference_pass_cost` (the same floating-point operations in the same
    order, so the results are bit-identical) with fewer array passes: accumulators are added into
    in place once they are this function's own arrays, and a bound's accumulator skips an operator
    that contributes +0.0 everywhere (adding +0.0 to a sum that started at +0.0 changes nothing).

    Long because it is the sweep's hot loop: one function keeps the in-place accumulators, the
    summation order and the skipped +0.0 terms visible side by side with the reference they must
    match bit for bit, and avoids a call per operator per bound."""
    ops = layer_ops(shape, ex)
    # an array pass: the scalar path would return None at its first array operand
    scalar = not (np.ndim(shape.tokens) or np.ndim(shape.pairs) or np.ndim(shape.kv_hbm_tokens)
                  or np.ndim(shape.kv_l2_tokens))
    fast = _pass_cost_scalar(shape, ex, ops) if scalar else None
    if fast is not None:
        return fast
    names = ("compute", "memory", "l2", "interconnect")
    record = RECORD_OPS.get()
    acc = [None, None, None, None]          # None: still the initial 0.0
    own = [False, False, False, False]
    work = []                               # the operators, their work summed on demand
    rows = []
    l2_ok = _l2_not_slower(ex)              # depends on ex only: once per pass, not per operator
    ends = {}                               # id(x) -> (x, the ends of its range) for affine operators
    order = summation_order(ops)
    if record:
        rows = [None] * len(ops)
    # small operators of one kind over one token array, priced together (engine.pass_batch)
    small = {} if record or not l2_ok else small_op_times(ops, order, ex, _DOMINANCE_MIN_SIZE)
    for j in order:
        op = ops[j]
        got = small.get(j)
        if got is not None:                 # already scaled by the count, in a new array
            tc, idx, lo, hi = got
            t = tc
        else:
            fast = None
            if type(op) is AffineOp:
                e = ends.get(id(op.x))
                if e is None or e[0] is not op.x:
                    e = ends[id(op.x)] = (op.x, _ends(op.x))
                if e[1] is not None:
                    fast = _dominant_term(op, ex, e[1])
                    if fast is None:
                        fast = _gemm_across_ridge(op, ex, e[1])
            elif op.max_flops_per_byte is not None:
                fast = _memory_bound(op, ex, l2_ok)
            t, idx = fast if fast is not None else _op_time(op, ex, l2_ok)
            cnt = op.count
            # t is _op_time's own new array: scale it in place
            tc = np.multiply(t, cnt, out=t) if type(t) is np.ndarray and t.ndim else t * cnt
            if np.ndim(idx) == 0:
                lo = hi = int(idx)
            else:
                lo, hi = int(idx.min()), int(idx.max())
        for i in range(lo, hi + 1):
            if lo == hi:
                # tc is this pass's own array (t scaled in place) unless operator rows keep it
                acc[i], own[i] = add_into(acc[i], own[i], tc, x_owned=tc is t and not record)
                continue
            acc[i], own[i] = _add_where(acc[i], own[i], tc, idx, i, lo, hi)
        work.append(op)                     # its FLOPs and bytes: read when the totals are
        if record:
            f = np.asarray(op.flops, dtype=float)
            h = np.asarray(op.hbm_bytes, dtype=float)
            rows[j] = (op.name, f * cnt * ex.stage_devices, h * cnt * ex.stage_devices, tc,
                       OP_BOUND_NAMES[idx if np.shape(idx) == np.shape(t) else np.broadcast_to(idx, np.shape(t))])
    kernels = kernel_count(shape, ex)
    gap = ex.hw.graph_kernel_launch_s if ex.rt.uses_cuda_graphs else ex.hw.kernel_launch_s
    device_s = 0
    d_own = False
    for a in acc:                            # Σ acc[b] (built-in sum: starts at int 0)
        if a is None:
            if np.ndim(device_s) == 0 and not d_own:
                device_s = device_s + 0.0
            continue
        device_s, d_own = add_into(device_s, d_own, a) if d_own else (device_s + a, True)
    device_s, d_own = add_into(device_s, d_own, kernels * gap) if d_own else (device_s + kernels * gap, True)
    host_s = kernels * ex.rt.host_per_kernel_s
    launch = 0.0 + kernels * gap
    if np.ndim(host_s) == 0 and type(device_s) is np.ndarray and device_s.ndim and \
            float(np.min(device_s)) > float(host_s):
        # the host keeps ahead everywhere (min propagates a NaN, which fails the test): the wait
        # max(host − device, 0) is +0.0 in every element, and adding +0.0 leaves the device time
        # (> 0) and the launch time (+0.0 or more) as they are
        time = device_s
    else:
        wait = host_s - device_s
        wait = np.maximum(wait, 0.0, out=wait) if isinstance(wait, np.ndarray) and wait.ndim else np.maximum(wait, 0.0)
        launch = launch + wait
        time, _ = add_into(device_s, d_own, wait)
    shp = np.shape(time)
    by = {b: bcast(0.0 if a is None else a, shp) for b, a in zip(names, acc)}
    by["launch"] = bcast(launch, shp)
    by = {b: by[b] for b in BOUNDS}
    cost = DeferredWork(np.asarray(time, dtype=float), by, rows, lambda: _work_totals(work, ex.stage_devices, shp))
    cost.__dict__["_pass_work"] = (work, ex.stage_devices, shp)      # for work_summed_over_passes
    return cost


def _add_where(a, owned: bool, tc, idx, i: int, lo: int, hi: int):
    """(a + where(idx == i, tc, 0.0), owned), the reference's sum for bound i (``a`` None is 0.0), in
    place into ``a`` when it is the caller's own of the sum's shape, else into the new ``where``
    array (addition is commutative); numpy's masked add (``where=``) runs 1.5–3× slower."""
    mask = idx == i
    if lo < i < hi and not mask.any():     # the smallest and largest index occur: +0.0 everywhere
        return a, owned
    part = np.where(mask, tc, 0.0)
    a = 0.0 if a is None else a
    shp = broadcast_shape(np.shape(a), part.shape)
    into = a if owned and type(a) is np.ndarray and a.shape == shp else part if part.shape == shp else None
    return np.add(a, part, out=into), True


def work_summed_over_passes(cost: Cost, n: int, zero):
    """(flops, hbm_bytes) of a :func:`pass_cost` priced over arrays whose leading axis stacks ``n``
    passes, summed over that axis from ``zero``: ((zero + w_0) + w_1) + … + w_{n−1}, w_d pass d's
    totals (:func:`_work_totals`), with the same operations, element for element, as over the
    stacked arrays: the leading operators whose arrays are small (at most an eighth of the pass's
    size: those before attention, which :func:`summation_order` puts last) summed over the stack at
    once, the rest on each pass's slices, so that the temporaries are one pass's size rather than
    n passes'. None when ``cost`` is not such a pass (its time lacks that axis) or its totals were
    read already."""
    pw = cost.__dict__.get("_pass_work")
    if pw is None or "_work" not in cost.__dict__ or len(pw[2]) < 1 or pw[2][0] != n:
        return None
    work, tp, shp = pw
    full = int(np.prod(shp))
    k = 0
    while k < len(work) and 8 * max(np.size(work[k].flops), np.size(work[k].hbm_bytes)) <= full:
        k += 1
    head = _work_sum(work[:k], (0.0, False, 0.0, False))
    flops = hbm = None
    f_own = h_own = False
    for d in range(n):
        fa, _, ha, _ = head
        f, fo, h, ho = _work_sum(work[k:], (_pass_slice(np.asarray(fa), d, len(shp) - 1), False,
                                            _pass_slice(np.asarray(ha), d, len(shp) - 1), False), d, len(shp) - 1)
        f, h = times_broadcast(f, fo, tp, shp[1:]), times_broadcast(h, ho, tp, shp[1:])     # new arrays
        flops, f_own = add_into(zero if flops is None else flops, f_own, f, x_owned=True)
        hbm, h_own = add_into(zero if hbm is None else hbm, h_own, h, x_owned=True)
    return flops, hbm


def _pass_slice(a: np.ndarray, d: int, ndim: int) -> np.ndarray:
    """Pass d's part of an operator's array over stacked passes (leading axis beyond ``ndim`` dims;
    an array without it, or of length 1 along it, is every pass's)."""
    if a.ndim <= ndim:
        return a
    return a[d] if a.shape[0] != 1 else a[0]


def _work_totals(work, tp, shp):
    """(flops, hbm_bytes) of a pass: Σ flops·count and Σ bytes·count over its operators, times the
    devices of a stage ``tp`` (Exec.stage_devices)."""
    flops, f_own, hbm, h_own = _work_sum(work, (0.0, False, 0.0, False))
    return times_broadcast(flops, f_own, tp, shp), times_broadcast(hbm, h_own, tp, shp)


def _work_sum(ops, start, index=None, ndim=0):
    """(flops, whether ours, hbm_bytes, whether ours): ``start``'s sums plus Σ flops·count and
    Σ bytes·count over ``ops`` in order; with ``index`` d each operator's pass-d slice
    (:func:`_pass_slice`, ``ndim`` one pass's dimensions)."""
    flops, f_own, hbm, h_own = start
    for op in ops:
        f, h, cnt = np.asarray(op.flops, dtype=float), np.asarray(op.hbm_bytes, dtype=float), op.count
        if index is not None:
            f, h = _pass_slice(f, index, ndim), _pass_slice(h, index, ndim)
        flops, f_own = add_into(flops, f_own, f * cnt, x_owned=True)       # f·cnt: a new array
        # the reference adds (h + 0.0)·count: that differs from h·count only for h = -0.0, and adding
        # -0.0 instead of +0.0 to a sum that started at +0.0 gives the same sum
        hbm, h_own = add_into(hbm, h_own, h * cnt, x_owned=True)
    return flops, f_own, hbm, h_own


def _pass_cost_scalar(shape: PassShape, ex: Exec, ops) -> Cost | None:
    """pass_cost of a single configuration in Python floats (IEEE doubles, the same operations in
    the same order as on numpy scalars, without numpy's per-call overhead). None when an operand
    is an array, a divisor is 0 or a time is NaN, negative or -0.0 (the array path handles those).

    Long because it is the hot path of single-record evaluation: the per-operator terms are inlined
    so that the operations and their order can be read against the reference in one place, without a
    Python call per operator."""
    peak_m, peak_v, bw, l2bw = ex.matrix_flops_per_s, ex.vector_flops_per_s, ex.hbm_bytes_per_s, \
        ex.hw.l2_bandwidth_bytes_per_s
    if np.ndim(peak_m) or np.ndim(peak_v) or np.ndim(bw) or np.ndim(l2bw) or not (peak_m and peak_v and bw and l2bw):
        return None         # array-valued rates (e.g. runtime efficiencies swept by calibrate.py): array path
    peak_m, peak_v, bw, l2bw = float(peak_m), float(peak_v), float(bw), float(l2bw)
    record = RECORD_OPS.get()
    acc = [0.0, 0.0, 0.0, 0.0]
    flops = hbm = 0.0
    rows = [None] * len(ops) if record else []
    copysign = math.copysign
    for j in summation_order(ops):
        op = ops[j]
        l2, cm = op.l2_bytes, op.comm_s
        if type(op) is AffineOp:
            x = op.x
            if getattr(x, "ndim", 0) or getattr(op.f1, "ndim", 0) or getattr(op.h0, "ndim", 0) \
                    or getattr(op.h1, "ndim", 0):
                return None                 # an array pass (checked before its arrays are built)
            # AffineOp's flops and hbm_bytes, f1·x and h0 + h1·x, on Python floats
            xf = float(x)
            f, h = float(op.f1) * xf, float(op.h0) + float(op.h1) * xf
            if getattr(l2, "ndim", 0) or getattr(cm, "ndim", 0):
                return None
        else:
            fl, hb = op.flops, op.hbm_bytes
            if getattr(fl, "ndim", 0) or getattr(hb, "ndim", 0) or getattr(l2, "ndim", 0) or getattr(cm, "ndim", 0):
                return None
            f, h = float(fl), float(hb)
        dq = op.dequant_flops
        if not (type(dq) is float and dq == 0.0):
            if getattr(dq, "ndim", 0):
                return None
            dq = float(dq)
        own = op.unit_flops_per_s
        rate = peak_v if op.kind == "vector" else peak_m if own is None else float(own)
        terms = roofline_terms(op.kind, f, h, float(l2), float(cm), dq, rate, peak_v, bw, l2bw)
        for x in terms:
            if not x > 0.0 and (x != 0.0 or copysign(1.0, x) < 0.0):
                return None
        t = max(terms)
        i = terms.index(t)
        cnt = op.count
        tc = t * cnt
        acc[i] = acc[i] + tc                # the other bounds add +0.0: no change
        flops = flops + f * cnt
        hbm = hbm + (h + 0.0) * cnt
        if record:
            rows[j] = (op.name, np.float64(f * cnt * ex.stage_devices), np.float64(h * cnt * ex.stage_devices), np.float64(tc),
                         OP_BOUND_NAMES[i])
    kernels = kernel_count(shape, ex)
    if getattr(kernels, "ndim", 0):
        return None
    k = float(kernels)
    gap = ex.hw.graph_kernel_launch_s if ex.rt.uses_cuda_graphs else ex.hw.kernel_launch_s
    device_s = 0 + acc[0] + acc[1] + acc[2] + acc[3] + k * gap
    host_s = k * ex.rt.host_per_kernel_s
    launch = 0.0 + k * gap
    wait = float(np.maximum(host_s - device_s, 0.0))
    launch = launch + wait
    time = device_s + wait
    by = {"compute": np.asarray(acc[0]), "memory": np.asarray(acc[1]), "l2": np.asarray(acc[2]),
          "interconnect": np.asarray(acc[3]), "launch": np.asarray(launch)}
    return Cost(np.asarray(time), np.asarray(flops * ex.stage_devices), np.asarray(hbm * ex.stage_devices), by, rows)


