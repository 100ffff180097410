"""A pass's small affine operators priced together (no physics here): :func:`small_op_times`.

In a sweep chunk most operators of a pass run on per-batch or per-prompt arrays (tens to hundreds
of elements: a decode's GEMMs over B·q tokens, a per-prompt prefill's over P), where each numpy call
costs more in Python than in arithmetic, and the plain path (:func:`costmodel.engine.pass_cost._op_time`:
the roofline terms, then their max and first argmax) takes some twenty calls per operator. Operators
of one kind over the same token array are priced here as one stacked evaluation with a leading axis of
operators: the same functions (``roofline.roofline_terms``, ``fast.arrays.max_argmax``) on arrays
whose row k holds operator k's coefficients, so every element is the same IEEE operations on the
same values as the operator's own evaluation, and row k is its answer. tests/test_pass_batch.py
compares each row with the plain path and whole passes with the reference pass.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.engine.execution import Exec
from costmodel.engine.ops import _LAZY, AffineOp
from costmodel.engine.roofline import roofline_terms, unit_flops_per_s
from costmodel.fast.arrays import max_argmax

_ZERO = np.float64(0.0)


def _plus_zero(v) -> bool:
    """``v`` is the scalar +0.0 (not -0.0, not an array)."""
    return type(v) is float and v == 0.0 and math.copysign(1.0, v) > 0.0


def _scalar(v) -> bool:
    return type(v) is float or (isinstance(v, (np.floating, np.ndarray)) and np.ndim(v) == 0)


def _eligible(op, below: int) -> bool:
    """An AffineOp over a small token array (fewer than ``below`` elements: the shortcuts of
    :mod:`costmodel.engine.pass_cost` do not look at it) with scalar coefficients, no dequantisation
    FLOPs, no L2 re-reads, no communication and its work not yet computed: the plain path's terms
    are then (compute, memory, +0.0, +0.0) (``_op_time``'s first branch)."""
    if type(op) is not AffineOp:
        return False
    x = op.x
    return type(x) is np.ndarray and 0 < x.size < below and x.dtype == np.float64 and \
        _scalar(op.f1) and _scalar(op.h0) and _scalar(op.h1) and _plus_zero(op.dequant_flops) and \
        _plus_zero(op.l2_bytes) and _plus_zero(op.comm_s) and op._flops is _LAZY and op._hbm is _LAZY


def small_op_times(ops, order, ex: Exec, below: int) -> dict:
    """{index in ``ops``: (seconds · count, bound index, lowest bound, highest bound)} for the
    operators that :func:`_eligible` admits (the caller has checked that the L2 is not slower than
    HBM), two or more of one kind over one token array priced together; what ``pass_cost`` would
    get from ``_op_time`` and then scale by the count, element for element. Each operator's
    ``flops`` and ``hbm_bytes`` are set to its row of the stacked work (the values it would compute
    itself). A group whose maximum term holds a NaN, a negative number or -0.0 is left out (the plain
    path, with its reference fallback, prices it)."""
    groups: dict = {}
    for j in order:
        op = ops[j]
        if _eligible(op, below):
            groups.setdefault((id(op.x), op.kind), []).append(j)
    out = {}
    vector_rate, bw = ex.vector_flops_per_s, ex.hbm_bytes_per_s
    if np.ndim(vector_rate) or np.ndim(bw):
        return out
    for (_, kind), idx in groups.items():
        if len(idx) < 2:
            continue
        group = [ops[j] for j in idx]
        rates = [unit_flops_per_s(op, ex) for op in group]
        if any(np.ndim(r) for r in rates):
            continue
        x = group[0].x
        # one row per operator: f1, h0, h1, its unit's FLOP rate, its count; each a column shaped to
        # broadcast against x along the operators' axis
        coef = np.array([(op.f1, op.h0, op.h1, r, op.count) for op, r in zip(group, rates)], dtype=float)
        f1, h0, h1, rate, count = coef.T.reshape((5, len(group)) + (1,) * x.ndim)
        flops = f1 * x                                                  # AffineOp: f1·x
        hbm = h0 + h1 * x                                               # AffineOp: h0 + h1·x
        c, m, _l2, _comm = roofline_terms(kind, flops, hbm, 0.0, 0.0, 0.0, rate, vector_rate, bw, None)
        fast = max_argmax((c, m, _ZERO, np.asarray(0.0)), new_terms=(0, 1))
        if fast is None:
            continue
        t, bound = fast
        t = np.multiply(t, count, out=t if t is c or t is m else None)
        if np.ndim(bound):
            flat = bound.reshape(len(group), -1)
            lows, highs = flat.min(axis=1), flat.max(axis=1)
        for k, (j, op) in enumerate(zip(idx, group)):
            op.flops, op.hbm_bytes = flops[k], hbm[k]
            if np.ndim(bound):
                out[j] = (t[k], bound[k], int(lows[k]), int(highs[k]))
            else:
                out[j] = (t[k], bound, int(bound), int(bound))
    return out
