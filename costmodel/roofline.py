"""Operator time on the roofline, and the binding resource of a pass.

For each operator:  t = max(FLOPs / achievable FLOP/s, HBM bytes / achievable bandwidth,
L2 bytes / L2 bandwidth, communication time), attributed to the term that binds.
A pass on the device takes Σ_ops t + kernels · device launch gap; the host issues the same
kernels in kernels · host_per_kernel_s. They overlap (the host runs ahead asynchronously), so

    pass time = max(device time, host time)

and the pass is 'launch'-bound when the host is the slower side.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass

import numpy as np

from .ops import Exec, PassShape, kernel_count, layer_ops

BOUNDS = ("compute", "memory", "l2", "interconnect", "launch")


@dataclass
class Cost:
    """Time and work of one or more passes (arrays; per device for time, whole group for work)."""

    time_s: np.ndarray
    flops: np.ndarray
    hbm_bytes: np.ndarray
    by_bound: dict            # bound -> seconds attributed
    ops: list                 # (name, flops, hbm_bytes, seconds, bound) per device, per pass

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.time_s + other.time_s, self.flops + other.flops, self.hbm_bytes + other.hbm_bytes,
                    {b: self.by_bound[b] + other.by_bound[b] for b in BOUNDS}, self.ops + other.ops)

    def scale(self, k) -> "Cost":
        """k sequential repetitions (k may be an array)."""
        k = np.asarray(k, dtype=float)
        return Cost(self.time_s * k, self.flops * k, self.hbm_bytes * k,
                    {b: v * k for b, v in self.by_bound.items()},
                    [(n, f * k, h * k, t * k, b) for n, f, h, t, b in self.ops])

    @staticmethod
    def zero(shape=()) -> "Cost":
        z = np.zeros(shape)
        return Cost(z, z, z, {b: z for b in BOUNDS}, [])

    def bound(self) -> np.ndarray:
        """Name of the resource with the most attributed time, per element."""
        shape = np.shape(self.time_s)
        fast = _max_argmax([_compact(np.broadcast_to(self.by_bound[b], shape)) for b in BOUNDS])
        if fast is not None:
            return _BOUND_NAMES[np.broadcast_to(fast[1], shape)]
        stack = np.stack([np.broadcast_to(self.by_bound[b], shape) for b in BOUNDS])
        return np.asarray(BOUNDS, dtype=object)[np.argmax(stack, axis=0)]


_BOUND_NAMES = np.asarray(BOUNDS, dtype=object)
_OP_BOUND_NAMES = np.asarray(("compute", "memory", "l2", "interconnect"), dtype=object)
#: whether pass_cost keeps the per-operator rows (Cost.ops); see operator_rows()
_RECORD_OPS = contextvars.ContextVar("costmodel_record_operator_rows", default=True)


@contextlib.contextmanager
def operator_rows(enabled: bool):
    """Within the block, pass_cost keeps (True, the default) or skips (False) the per-operator
    breakdown ``Cost.ops`` (used by ``evaluate(details=True)`` and plots). Skipping changes no other
    value; ``costmodel.sweep`` skips it."""
    token = _RECORD_OPS.set(bool(enabled))
    try:
        yield
    finally:
        _RECORD_OPS.reset(token)


def _compact(a: np.ndarray) -> np.ndarray:
    """A broadcast view (zero strides) as the smallest view that broadcasts back to it."""
    if a.ndim == 0 or 0 not in a.strides or a.size == 0:
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]


def _max_argmax(terms):
    """(max, first argmax) over ``terms`` elementwise, equal to np.stack(...).max(0) / .argmax(0)
    of the broadcast terms, without materialising the stack; the argmax may have a smaller shape
    that broadcasts to the max's. None when a term holds a NaN or a negative number (or -0.0),
    where the caller takes the reference path. For non-negative terms the first maximum is the
    last term that is strictly greater than the running maximum."""
    vals = [np.asarray(t, dtype=float) for t in terms]
    if all(v.ndim == 0 for v in vals):
        fl = [float(v) for v in vals]
        if not all(x >= 0.0 and math.copysign(1.0, x) > 0 for x in fl):
            return None
        m = max(fl)
        return np.float64(m), np.intp(fl.index(m))
    m, idx = vals[0], None
    if not _nonneg(m):
        return None
    for i, t in enumerate(vals[1:], start=1):
        if t.ndim == 0:
            x = float(t)
            if not (x >= 0.0 and math.copysign(1.0, x) > 0):
                return None
            if x == 0.0:             # never above a non-negative running max; max(m, 0) = m
                continue
        elif not _nonneg(t):
            return None
        gt = t > m
        if gt.ndim == 0 or gt.any():
            m = np.maximum(m, t)
            step = gt.view(np.int8) * np.int8(i) if gt.ndim else np.int8(i if gt else 0)
            idx = step if idx is None else np.maximum(idx, step)
        elif t.shape != m.shape and np.broadcast_shapes(t.shape, m.shape) != m.shape:
            m = np.broadcast_to(m, np.broadcast_shapes(t.shape, m.shape))
    if idx is None:
        idx = np.zeros(np.shape(m), dtype=np.int8)
    return m, idx


def _nonneg(a: np.ndarray) -> bool:
    """Every element is +0.0 .. +inf (no negative number, no -0.0, no NaN): read as uint64 the bit
    pattern is at most +inf's (a set sign bit or a NaN reads larger)."""
    if a.ndim == 0:
        x = float(a)
        return x >= 0.0 and math.copysign(1.0, x) > 0
    if a.dtype != np.float64:
        return False
    return bool(a.view(np.uint64).max() <= _INF_BITS)


_INF_BITS = int(np.array(np.inf).view(np.uint64))


def op_time(op, ex: Exec):
    """(seconds, bound index) of one operator instance."""
    t, idx = _op_time(op, ex)
    return t, np.broadcast_to(idx, np.shape(t)).astype(np.intp)


def _op_time(op, ex: Exec):
    """op_time with the bound index possibly compact (int8, broadcasting to the time's shape)."""
    peak = ex.vector_flops_per_s if op.kind == "vector" else ex.matrix_flops_per_s
    terms = (np.asarray(op.flops, dtype=float) / peak,
             np.asarray(op.hbm_bytes, dtype=float) / ex.hbm_bytes_per_s,
             np.asarray(op.l2_bytes, dtype=float) / ex.hw.l2_bandwidth_bytes_per_s,
             np.asarray(op.comm_s, dtype=float))
    fast = _max_argmax(terms)
    if fast is not None:
        return fast
    stack = np.stack(np.broadcast_arrays(*terms))
    return stack.max(axis=0), stack.argmax(axis=0)


def pass_cost(shape: PassShape, ex: Exec) -> Cost:
    """Cost of one forward pass of ``shape`` on ``ex`` (see module docstring).

    The arithmetic of :func:`_pass_cost_reference` (the same floating-point operations in the same
    order, so the results are bit-identical) with fewer array passes: accumulators are added into
    in place once they are this function's own arrays, and a bound's accumulator skips an operator
    that contributes +0.0 everywhere (adding +0.0 to a sum that started at +0.0 changes nothing)."""
    ops = layer_ops(shape, ex)
    names = ("compute", "memory", "l2", "interconnect")
    record = _RECORD_OPS.get()
    acc = [None, None, None, None]          # None: still the initial 0.0
    own = [False, False, False, False]
    flops = hbm = 0.0
    f_own = h_own = False
    rows = []
    for op in ops:
        t, idx = _op_time(op, ex)
        cnt = op.count
        tc = t * cnt
        if np.ndim(idx) == 0:
            lo = hi = int(idx)
        else:
            lo, hi = int(idx.min()), int(idx.max())
        for i in range(lo, hi + 1):
            if lo == hi:
                c = tc
            else:
                mask = idx == i
                if not mask.any():
                    continue
                c = np.where(mask, tc, 0.0)
            acc[i], own[i] = _add(acc[i], own[i], c)
        f = np.asarray(op.flops, dtype=float)
        h = np.asarray(op.hbm_bytes, dtype=float)
        flops, f_own = _add(flops, f_own, f * cnt) if f_own else (flops + f * cnt, True)
        hbm, h_own = _add(hbm, h_own, (h + 0.0) * cnt) if h_own else (hbm + (h + 0.0) * cnt, True)
        if record:
            rows.append((op.name, f * cnt * ex.tp, h * cnt * ex.tp, tc,
                         _OP_BOUND_NAMES[np.broadcast_to(idx, np.shape(t))]))
    kernels = kernel_count(shape, ex)
    gap = ex.hw.graph_kernel_launch_s if ex.rt.uses_cuda_graphs else ex.hw.kernel_launch_s
    device_s = 0
    d_own = False
    for a in acc:                            # Σ acc[b] (built-in sum: starts at int 0)
        if a is None:
            if np.ndim(device_s) == 0 and not d_own:
                device_s = device_s + 0.0
            continue
        device_s, d_own = _add(device_s, d_own, a) if d_own else (device_s + a, True)
    device_s, d_own = _add(device_s, d_own, kernels * gap) if d_own else (device_s + kernels * gap, True)
    host_s = kernels * ex.rt.host_per_kernel_s
    launch = 0.0 + kernels * gap
    wait = host_s - device_s
    wait = np.maximum(wait, 0.0, out=wait) if isinstance(wait, np.ndarray) and wait.ndim else np.maximum(wait, 0.0)
    launch = launch + wait
    time, _ = _add(device_s, d_own, wait)
    shp = np.shape(time)
    by = {b: np.broadcast_to(np.asarray(0.0 if a is None else a, dtype=float), shp) for b, a in zip(names, acc)}
    by["launch"] = np.broadcast_to(np.asarray(launch, dtype=float), shp)
    by = {b: by[b] for b in BOUNDS}
    return Cost(np.asarray(time, dtype=float), _times(flops, f_own, ex.tp, shp), _times(hbm, h_own, ex.tp, shp),
                by, rows)


def _add(acc, owned: bool, x):
    """(acc + x, owned): in place when acc is this function's own array of the result's shape."""
    if acc is None:
        return 0.0 + x, True
    if owned and isinstance(acc, np.ndarray) and acc.ndim and np.ndim(x) <= acc.ndim and \
            np.broadcast_shapes(acc.shape, np.shape(x)) == acc.shape:
        return np.add(acc, x, out=acc), True
    return acc + x, True


def _times(a, owned: bool, k, shp):
    """np.broadcast_to(a * k, shp).astype(float), without copies when ``a`` is already ours."""
    a = a * k if k != 1 else a
    if owned and isinstance(a, np.ndarray) and a.shape == shp and a.dtype == np.float64:
        return a
    return np.broadcast_to(a, shp).astype(float)


def _pass_cost_reference(shape: PassShape, ex: Exec, ops) -> Cost:
    """pass_cost as written first (the formulas, one array operation at a time)."""
    names = ("compute", "memory", "l2", "interconnect")
    acc = {b: 0.0 for b in BOUNDS}
    flops = hbm = 0.0
    rows = []
    for op in ops:
        t, idx = op_time(op, ex)
        idx = np.broadcast_to(idx, np.shape(t))
        for i, b in enumerate(names):
            acc[b] = acc[b] + np.where(idx == i, t, 0.0) * op.count
        flops = flops + np.asarray(op.flops, dtype=float) * op.count
        hbm = hbm + (np.asarray(op.hbm_bytes, dtype=float) + 0.0) * op.count
        rows.append((op.name, np.asarray(op.flops, float) * op.count * ex.tp,
                     np.asarray(op.hbm_bytes, float) * op.count * ex.tp, t * op.count,
                     np.asarray(names, dtype=object)[idx]))
    kernels = kernel_count(shape, ex)
    gap = ex.hw.graph_kernel_launch_s if ex.rt.uses_cuda_graphs else ex.hw.kernel_launch_s
    device_s = sum(acc[b] for b in names) + kernels * gap
    host_s = kernels * ex.rt.host_per_kernel_s
    acc["launch"] = acc["launch"] + kernels * gap
    # host-bound: the device waits for the host; attribute the waiting to 'launch'
    wait = np.maximum(host_s - device_s, 0.0)
    acc["launch"] = acc["launch"] + wait
    time = device_s + wait
    shp = np.shape(time)
    return Cost(np.asarray(time, dtype=float), np.broadcast_to(flops * ex.tp, shp).astype(float),
                np.broadcast_to(hbm * ex.tp, shp).astype(float),
                {b: np.broadcast_to(np.asarray(v, dtype=float), shp) for b, v in acc.items()}, rows)


def overhead_cost(seconds, shape=()) -> Cost:
    """A fixed host overhead (per-step bookkeeping), attributed to 'launch'."""
    c = Cost.zero(shape)
    s = np.broadcast_to(np.asarray(seconds, dtype=float), np.shape(c.time_s) if shape else np.shape(seconds))
    c.time_s = c.time_s + s
    c.by_bound = dict(c.by_bound, launch=c.by_bound["launch"] + s)
    return c


def comm_cost(seconds) -> Cost:
    """A transfer between devices, attributed to 'interconnect'."""
    s = np.asarray(seconds, dtype=float)
    z = np.zeros_like(s)
    return Cost(s, z, z, {b: (s if b == "interconnect" else z) for b in BOUNDS}, [])
