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

from costmodel.fast.arrays import add, bcast, compact_as, max_argmax, multiply
from costmodel.engine.execution import Exec
from costmodel.engine.ops import PassShape, kernel_count, layer_ops

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
            return DeferredWork(add(self.time_s, other.time_s),
                                 lambda: {b: add(self.by_bound[b], other.by_bound[b]) for b in BOUNDS},
                                 self.ops + other.ops,
                                 lambda: (add(self.flops, other.flops), add(self.hbm_bytes, other.hbm_bytes)))
        return Cost(add(self.time_s, other.time_s), add(self.flops, other.flops),
                    add(self.hbm_bytes, other.hbm_bytes),
                    {b: add(self.by_bound[b], other.by_bound[b]) for b in BOUNDS}, self.ops + other.ops)

    def scale(self, k) -> "Cost":
        """k sequential repetitions (k may be an array)."""
        k = np.asarray(k, dtype=float)
        if "_work" in self.__dict__:
            return DeferredWork(multiply(self.time_s, k), lambda: {b: multiply(v, k) for b, v in self.by_bound.items()},
                                 [(n, f * k, h * k, t * k, b) for n, f, h, t, b in self.ops],
                                 lambda: (multiply(self.flops, k), multiply(self.hbm_bytes, k)))
        return Cost(self.time_s * k, self.flops * k, self.hbm_bytes * k,
                    {b: v * k for b, v in self.by_bound.items()},
                    [(n, f * k, h * k, t * k, b) for n, f, h, t, b in self.ops])

    @staticmethod
    def zero(shape=()) -> "Cost":
        z = np.broadcast_to(np.float64(0.0), shape)     # read-only zeros, nothing to fill
        return Cost(z, z, z, {b: z for b in BOUNDS}, [])

    def bound(self) -> np.ndarray:
        """Name of the resource with the most attributed time, per element."""
        return BOUND_NAMES[self.bound_index()]

    def bound_index(self) -> np.ndarray:
        """Index into :data:`BOUNDS` of the resource with the most attributed time (the first on a
        tie), per element: int8, shaped like ``time_s`` (possibly a broadcast view). Kept on the
        Cost once computed, read-only (a Cost is not changed once built: a sweep's autoregressive
        and speculative blocks share one prefill Cost, ``engine.pass_memo``)."""
        kept = self.__dict__.get("_bound_index")
        if kept is not None and kept[0] is self.time_s and kept[1] is self.by_bound:
            return kept[2]
        shape = np.shape(self.time_s)
        fast = max_argmax([compact_as(self.by_bound[b], shape) for b in BOUNDS], max_wanted=False)
        if fast is not None:
            idx = np.broadcast_to(np.asarray(fast[1], dtype=np.int8), shape)
        else:
            stack = np.stack([np.broadcast_to(self.by_bound[b], shape) for b in BOUNDS])
            idx = np.argmax(stack, axis=0).astype(np.int8)
            idx.flags.writeable = False
        self.__dict__["_bound_index"] = (self.time_s, self.by_bound, idx)
        return idx


class DeferredWork(Cost):
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


BOUND_NAMES = np.asarray(BOUNDS, dtype=object)
OP_BOUND_NAMES = np.asarray(("compute", "memory", "l2", "interconnect"), dtype=object)
#: whether pass_cost keeps the per-operator rows (Cost.ops); see operator_rows()
RECORD_OPS = contextvars.ContextVar("costmodel_record_operator_rows", default=True)


@contextlib.contextmanager
def operator_rows(enabled: bool):
    """Within the block, pass_cost keeps (True, the default) or skips (False) the per-operator
    breakdown ``Cost.ops`` (used by ``evaluate(details=True)`` and plots). Skipping changes no other
    value; ``costmodel.sweep`` skips it."""
    token = RECORD_OPS.set(bool(enabled))
    try:
        yield
    finally:
        RECORD_OPS.reset(token)


def op_time(op, ex: Exec):
    """(seconds, bound index) of one operator instance: the largest of :func:`op_terms` and which."""
    stack = np.stack(np.broadcast_arrays(*op_terms(op, ex)))
    return stack.max(axis=0), stack.argmax(axis=0)


#: p of the GEMM p-norm roofline t = (c^p + m^p)^(1/p). Fitted (least squares on log efficiency)
#: to LLMCompass's real-hardware A100 fp16 GEMM shape data, N = K = 12288, M = 64 / 128 / 256 / 512 ->
#: 0.33 / 0.62 / 0.78 / 0.81 of peak (reference hardware_notes §7, source llmcompass_a100), with
#: the model's A100 terms of the time (312 TFLOP/s · 0.939, the best-shape GEMM fraction, 2.039 TB/s
#: · 0.88): best p = 2.0; the model gave 0.34 / 0.57 / 0.78 / 0.89 with p = 2 against 0.36 / 0.72 /
#: 0.94 / 0.94 with the max (p = ∞). With the A100's prefill-shape fraction (0.84, M = 2048 of the same
#: data) p = 2 gives 0.33 / 0.55 / 0.72 / 0.80 (best p 2.7: 0.35 / 0.60 / 0.77 / 0.83); p = 2 is kept,
#: a little more near-ridge loss than these shapes show. Assumed to hold on other GPUs (no shape data
#: for them). Independent of the validation rows.
GEMM_OVERLAP_P = 2.0


def gemm_time_s(c, m, out=None):
    """Time of a GEMM with compute term ``c`` and memory term ``m``: √(c² + m²) (the p-norm roofline,
    p = :data:`GEMM_OVERLAP_P`), computed as sqrt(c·c + m·m) — correctly rounded IEEE operations,
    so Python floats and numpy arrays give the same bits. ``out``: write into ``c``'s array (which
    is then overwritten) instead of allocating."""
    if type(c) is float and type(m) is float:
        return math.sqrt(c * c + m * m)
    if out is None:
        return np.sqrt(c * c + m * m)
    return np.sqrt(np.add(np.multiply(c, c, out=c), np.multiply(m, m, out=m), out=c), out=c)


def gemm_overlap(c, m):
    """(compute, memory) terms of a matrix operator with the binding one raised to
    :func:`gemm_time_s` = √(c² + m²): the time of a GEMM, still attributed to the larger term."""
    if type(c) is float and type(m) is float:          # the scalar path (Python floats)
        h = gemm_time_s(c, m)
        return (h, m) if c >= m else (c, h)
    c, m = np.asarray(c, dtype=float), np.asarray(m, dtype=float)
    h = gemm_time_s(c, m)
    ge = c >= m
    return np.where(ge, h, c), np.where(ge, m, h)


def compute_term_s(flops, dequant_flops, unit_flops_per_s, vector_flops_per_s, out=None):
    """Compute term: FLOPs / the achievable rate of the operator's unit, plus (only when there are
    any) the dequantisation FLOPs of a weight-only quantised GEMM / the vector rate — the same
    kernel issues both, so they add. ``out``: an array of the result's shape to write into (the
    caller's own ``flops``) instead of allocating."""
    c = flops / unit_flops_per_s if out is None else np.divide(flops, unit_flops_per_s, out=out)
    if type(dequant_flops) is float and dequant_flops == 0.0:
        return c
    return c + dequant_flops / vector_flops_per_s if out is None else \
        np.add(c, dequant_flops / vector_flops_per_s, out=out)


def memory_term_s(hbm_bytes, hbm_bytes_per_s, out=None):
    """Memory term: HBM bytes / achievable HBM bandwidth (``out``: as for :func:`compute_term_s`)."""
    return hbm_bytes / hbm_bytes_per_s if out is None else np.divide(hbm_bytes, hbm_bytes_per_s, out=out)


def l2_term_s(hbm_bytes, l2_bytes, l2_bytes_per_s):
    """L2 term: every byte an SM reads crosses the L2, whether it came from HBM or was already
    there: (HBM bytes + L2 re-reads) / L2 bandwidth."""
    return (hbm_bytes + l2_bytes) / l2_bytes_per_s


def unit_flops_per_s(op, ex: Exec):
    """Achievable FLOP/s of the unit an operator runs on: the vector rate for elementwise and
    reduction kernels, the matrix (tensor-core) rate for the rest (the operator's own
    ``Op.unit_flops_per_s`` when it runs in another dtype than the pass: fp16 MoE experts in an fp8
    engine)."""
    if op.kind == "vector":
        return ex.vector_flops_per_s
    own = op.unit_flops_per_s
    return ex.matrix_flops_per_s if own is None else own


def roofline_terms(kind, flops, hbm_bytes, l2_bytes, comm_s, dequant_flops, unit_rate, vector_rate, hbm_rate,
                   l2_rate) -> tuple:
    """The four roofline terms (compute, memory, l2, interconnect) of one operator, in seconds, with
    the GEMM overlap rule applied to a matrix operator. The one statement of an operator's terms:
    :func:`op_terms` (arrays) and the scalar pass (Python floats) both call it."""
    c, m = compute_term_s(flops, dequant_flops, unit_rate, vector_rate), memory_term_s(hbm_bytes, hbm_rate)
    if kind == "matrix":
        c, m = gemm_overlap(c, m)
    return c, m, (None if l2_rate is None else l2_term_s(hbm_bytes, l2_bytes, l2_rate)), comm_s


def op_terms(op, ex: Exec, with_l2: bool = True) -> tuple:
    """The roofline terms of one operator instance, in bound order (compute, memory, l2,
    interconnect): :func:`roofline_terms` on the operator's arrays. ``with_l2=False`` leaves the
    l2 term out (None), for a caller that knows it cannot bind."""
    return roofline_terms(op.kind, np.asarray(op.flops, dtype=float), np.asarray(op.hbm_bytes, dtype=float),
                          op.l2_bytes, np.asarray(op.comm_s, dtype=float), as_dequant(op.dequant_flops),
                          unit_flops_per_s(op, ex), ex.vector_flops_per_s, ex.hbm_bytes_per_s,
                          ex.hw.l2_bandwidth_bytes_per_s if with_l2 else None)


def as_dequant(dq):
    """The dequantisation FLOPs as an array, or the float 0.0 that marks 'none'."""
    return dq if type(dq) is float and dq == 0.0 else np.asarray(dq, dtype=float)


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
        rows[j] = (op.name, np.asarray(op.flops, float) * op.count * ex.stage_devices,
                   np.asarray(op.hbm_bytes, float) * op.count * ex.stage_devices, t * op.count,
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
    return Cost(np.asarray(time, dtype=float), np.broadcast_to(flops * ex.stage_devices, shp).astype(float),
                np.broadcast_to(hbm * ex.stage_devices, shp).astype(float),
                {b: np.broadcast_to(np.asarray(v, dtype=float), shp) for b, v in acc.items()}, rows)


def overhead_cost(seconds, shape=()) -> Cost:
    """A fixed host overhead (per-step bookkeeping), attributed to 'launch'."""
    c = Cost.zero(shape)
    s = np.broadcast_to(np.asarray(seconds, dtype=float), np.shape(c.time_s) if shape else np.shape(seconds))
    c.time_s = add(c.time_s, s)
    c.by_bound = dict(c.by_bound, launch=add(c.by_bound["launch"], s))
    return c


def comm_cost(seconds) -> Cost:
    """A transfer between devices, attributed to 'interconnect'."""
    s = np.asarray(seconds, dtype=float)
    z = np.zeros_like(s)
    return Cost(s, z, z, {b: (s if b == "interconnect" else z) for b in BOUNDS}, [])

