"""Operator time on the roofline, and the binding resource of a pass.

For each operator:  t = max(FLOPs / achievable FLOP/s, HBM bytes / achievable bandwidth,
(HBM bytes + L2 re-reads) / L2 bandwidth, communication time), attributed to the term that binds
(every byte an SM reads crosses the L2, whether it came from HBM or was already there).

A GEMM's math and its weight stream overlap imperfectly near the ridge point: measured GEMMs take
√(c² + m²) rather than max(c, m) (c, m its compute and memory terms; a p-norm roofline with p = 2,
:data:`GEMM_OVERLAP_P`), so for a matrix operator the binding one of the two terms is replaced by
√(c² + m²). Far from the ridge this is max(c, m) to within (1/2)·(min/max)²: decode GEMVs and long
prefills are unchanged, verification of tens of tokens and mid-size batches are not.
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

from costmodel.engine.ops import Exec, PassShape, kernel_count, layer_ops

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
        if "_work" in self.__dict__ or "_work" in other.__dict__:     # keep the work totals deferred
            return _DeferredWork(_sum(self.time_s, other.time_s),
                                 lambda: {b: _sum(self.by_bound[b], other.by_bound[b]) for b in BOUNDS},
                                 self.ops + other.ops,
                                 lambda: (_sum(self.flops, other.flops), _sum(self.hbm_bytes, other.hbm_bytes)))
        return Cost(_sum(self.time_s, other.time_s), _sum(self.flops, other.flops),
                    _sum(self.hbm_bytes, other.hbm_bytes),
                    {b: _sum(self.by_bound[b], other.by_bound[b]) for b in BOUNDS}, self.ops + other.ops)

    def scale(self, k) -> "Cost":
        """k sequential repetitions (k may be an array)."""
        k = np.asarray(k, dtype=float)
        if "_work" in self.__dict__:
            return _DeferredWork(_prod(self.time_s, k), lambda: {b: _prod(v, k) for b, v in self.by_bound.items()},
                                 [(n, f * k, h * k, t * k, b) for n, f, h, t, b in self.ops],
                                 lambda: (_prod(self.flops, k), _prod(self.hbm_bytes, k)))
        return Cost(self.time_s * k, self.flops * k, self.hbm_bytes * k,
                    {b: v * k for b, v in self.by_bound.items()},
                    [(n, f * k, h * k, t * k, b) for n, f, h, t, b in self.ops])

    @staticmethod
    def zero(shape=()) -> "Cost":
        z = np.broadcast_to(np.float64(0.0), shape)     # read-only zeros, nothing to fill
        return Cost(z, z, z, {b: z for b in BOUNDS}, [])

    def bound(self) -> np.ndarray:
        """Name of the resource with the most attributed time, per element."""
        return _BOUND_NAMES[self.bound_index()]

    def bound_index(self) -> np.ndarray:
        """Index into :data:`BOUNDS` of the resource with the most attributed time (the first on a
        tie), per element: int8, shaped like ``time_s`` (possibly a broadcast view)."""
        shape = np.shape(self.time_s)
        from costmodel.engine.pass_cost import _bcast, _compact, _max_argmax
        fast = _max_argmax([_compact(_bcast(self.by_bound[b], shape)) for b in BOUNDS])
        if fast is not None:
            return np.broadcast_to(np.asarray(fast[1], dtype=np.int8), shape)
        stack = np.stack([np.broadcast_to(self.by_bound[b], shape) for b in BOUNDS])
        return np.argmax(stack, axis=0).astype(np.int8)


class _DeferredWork(Cost):
    """A Cost whose work totals (``flops``, ``hbm_bytes``) are summed when first read, with the
    same operations in the same order as eagerly: a prefill pass's totals, for one, are never read
    by evaluate(), and on large arrays they are a tenth of the pass's arithmetic. ``by_bound`` may
    be deferred the same way (given as a function): evaluate()'s autoregressive baseline reads only
    ``time_s``. ``time_s`` and ``ops`` are computed at once."""

    def __init__(self, time_s, by_bound, ops, work):
        self.time_s, self.ops = time_s, ops
        if callable(by_bound):
            self._by_bound = by_bound
        else:
            self.by_bound = by_bound
        self._work = work

    def __getattr__(self, name):            # only reached while by_bound / flops / hbm_bytes are unset
        if name == "by_bound" and "_by_bound" in self.__dict__:
            self.by_bound = self.__dict__.pop("_by_bound")()
            return self.by_bound
        work = self.__dict__.get("_work")
        if name not in ("flops", "hbm_bytes") or work is None:
            raise AttributeError(name)
        self.flops, self.hbm_bytes = work()
        del self.__dict__["_work"]
        return self.__dict__[name]


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


def op_time(op, ex: Exec):
    """(seconds, bound index) of one operator instance: the largest of :func:`op_terms` and which."""
    stack = np.stack(np.broadcast_arrays(*op_terms(op, ex)))
    return stack.max(axis=0), stack.argmax(axis=0)


#: p of the GEMM p-norm roofline t = (c^p + m^p)^(1/p). Fitted (least squares on log efficiency)
#: to LLMCompass's real-hardware A100 fp16 GEMM shape data, N = K = 12288, M = 64 / 128 / 256 / 512 ->
#: 0.33 / 0.62 / 0.78 / 0.81 of peak (reference hardware_notes §7, source llmcompass_a100), with
#: this model's A100 terms (312 TFLOP/s · 0.939, 2.039 TB/s · 0.88): best p = 2.04; the model gives
#: 0.34 / 0.57 / 0.78 / 0.89 with p = 2 against 0.36 / 0.72 / 0.94 / 0.94 with the max (p = ∞).
#: Assumed to hold on other GPUs (no shape data for them). Independent of the validation rows.
GEMM_OVERLAP_P = 2.0


def gemm_overlap(c, m):
    """(compute, memory) terms of a matrix operator with the binding one raised to √(c² + m²)
    (:data:`GEMM_OVERLAP_P` = 2): the time of a GEMM is √(c² + m²), still attributed to the larger
    term. Computed as sqrt(c·c + m·m) (correctly rounded IEEE operations, so Python floats and
    numpy arrays give the same bits)."""
    if type(c) is float and type(m) is float:          # the scalar path (Python floats)
        h = math.sqrt(c * c + m * m)
        return (h, m) if c >= m else (c, h)
    c, m = np.asarray(c, dtype=float), np.asarray(m, dtype=float)
    h = np.sqrt(c * c + m * m)
    ge = c >= m
    return np.where(ge, h, c), np.where(ge, m, h)


def _compute_term(op, ex: Exec):
    """FLOPs / achievable rate of the operator's unit, plus (only when the operator has any) its
    dequantisation FLOPs / the vector rate: the same kernel issues both, so they add."""
    peak = ex.vector_flops_per_s if op.kind == "vector" else ex.matrix_flops_per_s
    c = np.asarray(op.flops, dtype=float) / peak
    dq = op.dequant_flops
    if type(dq) is float and dq == 0.0:
        return c
    return c + np.asarray(dq, dtype=float) / ex.vector_flops_per_s


def op_terms(op, ex: Exec) -> tuple:
    """The roofline terms of one operator instance, in bound order (compute, memory, l2,
    interconnect): seconds at each resource's achievable rate. The compute term is FLOPs at the
    operator's unit plus, for weight-only quantised GEMMs, the dequantisation FLOPs at the vector
    rate (``Op.dequant_flops``). (``_pass_cost_scalar`` repeats these formulas on Python floats:
    keep the two in step.)"""
    c, m = _compute_term(op, ex), np.asarray(op.hbm_bytes, dtype=float) / ex.hbm_bytes_per_s
    if op.kind == "matrix":
        c, m = gemm_overlap(c, m)
    return (c, m,
            (np.asarray(op.hbm_bytes, dtype=float) + op.l2_bytes) / ex.hw.l2_bandwidth_bytes_per_s,
            np.asarray(op.comm_s, dtype=float))


def pass_cost(shape: PassShape, ex: Exec) -> Cost:
    """Cost of one forward pass of ``shape`` on ``ex`` (module docstring).

    :func:`reference_pass_cost` is the specification, written one array operation at a time;
    this runs :mod:`costmodel.engine.pass_cost`, the same floating-point operations in the same
    order with fewer array passes (bit-identical: tests/test_sweep.py checks it)."""
    from costmodel.engine import pass_cost as _roofline_fast
    return _roofline_fast.pass_cost(shape, ex)


def summation_order(ops) -> list:
    """Indices of ``ops`` in the order a pass adds up their times and work: every operator but
    attention, then attention (each in layer order). A fixed order, so that one configuration and
    a grid of them give the same sums bit for bit; while decoding, attention is the one operator
    whose arrays span the whole batch × context grid, and adding it last keeps the other additions
    on the small per-batch arrays. (``Cost.ops`` keeps the layer order.)"""
    return ([i for i, op in enumerate(ops) if op.kind != "attention"]
            + [i for i, op in enumerate(ops) if op.kind == "attention"])


def reference_pass_cost(shape: PassShape, ex: Exec, ops=None) -> Cost:
    """The pass as a specification, one array operation at a time (module docstring): each
    operator's time goes to the bound that binds it; device time = Σ op times (in
    :func:`summation_order`) + kernels · gap; the host needs kernels · host_per_kernel_s; the pass
    takes the larger, the wait counted as 'launch'."""
    ops = layer_ops(shape, ex) if ops is None else ops
    names = ("compute", "memory", "l2", "interconnect")
    acc = {b: 0.0 for b in BOUNDS}
    flops = hbm = 0.0
    rows = [None] * len(ops)
    for j in summation_order(ops):
        op = ops[j]
        t, idx = op_time(op, ex)
        idx = np.broadcast_to(idx, np.shape(t))
        for i, b in enumerate(names):
            acc[b] = acc[b] + np.where(idx == i, t, 0.0) * op.count
        flops = flops + np.asarray(op.flops, dtype=float) * op.count
        hbm = hbm + (np.asarray(op.hbm_bytes, dtype=float) + 0.0) * op.count
        rows[j] = (op.name, np.asarray(op.flops, float) * op.count * ex.tp,
                   np.asarray(op.hbm_bytes, float) * op.count * ex.tp, t * op.count,
                   np.asarray(names, dtype=object)[idx])
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
    c.time_s = _sum(c.time_s, s)
    c.by_bound = dict(c.by_bound, launch=_sum(c.by_bound["launch"], s))
    return c


def comm_cost(seconds) -> Cost:
    """A transfer between devices, attributed to 'interconnect'."""
    s = np.asarray(seconds, dtype=float)
    z = np.zeros_like(s)
    return Cost(s, z, z, {b: (s if b == "interconnect" else z) for b in BOUNDS}, [])


# a + b and a * b with the same elements and fewer full-size passes (broadcast operands); imported
# last because _roofline_fast imports this module
from costmodel.engine.pass_cost import _prod, _sum  # noqa: E402
