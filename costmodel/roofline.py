"""Operator time on the roofline, and the binding resource of a pass.

For each operator:  t = max(FLOPs / achievable FLOP/s, HBM bytes / achievable bandwidth,
L2 bytes / L2 bandwidth, communication time), attributed to the term that binds.
A pass on the device takes Σ_ops t + kernels · device launch gap; the host issues the same
kernels in kernels · host_per_kernel_s. They overlap (the host runs ahead asynchronously), so

    pass time = max(device time, host time)

and the pass is 'launch'-bound when the host is the slower side.
"""

from __future__ import annotations

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
        stack = np.stack([np.broadcast_to(self.by_bound[b], np.shape(self.time_s)) for b in BOUNDS])
        return np.asarray(BOUNDS, dtype=object)[np.argmax(stack, axis=0)]


def op_time(op, ex: Exec):
    """(seconds, bound index) of one operator instance."""
    peak = ex.vector_flops_per_s if op.kind == "vector" else ex.matrix_flops_per_s
    terms = np.broadcast_arrays(
        np.asarray(op.flops, dtype=float) / peak,
        np.asarray(op.hbm_bytes, dtype=float) / ex.hbm_bytes_per_s,
        np.asarray(op.l2_bytes, dtype=float) / ex.hw.l2_bandwidth_bytes_per_s,
        np.asarray(op.comm_s, dtype=float))
    stack = np.stack(terms)
    return stack.max(axis=0), stack.argmax(axis=0)


def pass_cost(shape: PassShape, ex: Exec) -> Cost:
    """Cost of one forward pass of ``shape`` on ``ex`` (see module docstring)."""
    ops = layer_ops(shape, ex)
    names = ("compute", "memory", "l2", "interconnect")
    acc = {b: 0.0 for b in BOUNDS}
    flops = hbm = 0.0
    rows = []
    for op in ops:
        t, idx = op_time(op, ex)
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
