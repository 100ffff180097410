"""What it runs on: one accelerator, loaded from ``hardware_specs/<id>.yaml`` (schema: hardware_specs/README.md).

All numbers SI: FLOP/s, bytes, bytes/s, seconds. Peaks are dense datasheet figures; the
``efficiency`` block gives the achievable fraction with its source.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np

from costmodel.errors import InputError
from costmodel.inputs.specs import Fields, load_yaml, resolve

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4")


@dataclass(frozen=True)
class Link:
    type: str
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class PowerMode:
    id: str
    power_w: float
    compute_scale: float
    bandwidth_scale: float


@dataclass(frozen=True)
class Hardware:
    id: str
    name: str
    vendor: str
    kind: str
    sm_count: int
    matrix_flops_per_s: dict          # dtype -> dense peak FLOP/s, or None when unsupported
    vector_flops_per_s: float
    memory_type: str
    capacity_bytes: float
    usable_bytes: float
    bandwidth_bytes_per_s: float
    unified_with_cpu: bool
    l2_bytes: float
    l2_bandwidth_bytes_per_s: float
    kernel_launch_s: float
    graph_kernel_launch_s: float
    memory_efficiency: float
    matrix_efficiency: float
    devices_per_node: int
    scale_up: Link
    host: Link
    network: Link
    tdp_w: float
    power_modes: tuple = ()
    power_mode: str | None = None
    sources: tuple = field(default=(), compare=False)
    source_file: str = ""

    def matrix_peak(self, dtype: str) -> float:
        """Dense matrix FLOP/s for ``dtype``; falls back to the FP32 vector rate when unsupported."""
        v = self.matrix_flops_per_s.get(dtype)
        return float(v) if v else self.vector_flops_per_s

    def supports(self, dtype: str) -> bool:
        return bool(self.matrix_flops_per_s.get(dtype))

    def with_power_mode(self, mode_id: str | None) -> "Hardware":
        """The device in a power mode (Jetson): compute and bandwidth scaled by the mode's clocks."""
        if mode_id is None:
            return self
        ids = [m.id for m in self.power_modes]
        match = [m for m in self.power_modes if m.id.lower() == str(mode_id).lower()]
        if not match:
            raise InputError(f"unknown power mode {mode_id!r} for {self.id}", field="power_mode",
                             allowed=", ".join(ids) if ids else "none (this device has no power modes)")
        m = match[0]
        return replace(
            self, power_mode=m.id,
            matrix_flops_per_s={k: (v * m.compute_scale if v else v) for k, v in self.matrix_flops_per_s.items()},
            vector_flops_per_s=self.vector_flops_per_s * m.compute_scale,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s * m.bandwidth_scale,
            tdp_w=m.power_w)

    def link_for(self, n_devices: int) -> Link:
        """Link a group of ``n_devices`` talks over: scale-up inside a node, the network across nodes."""
        return self.scale_up if n_devices <= self.devices_per_node else self.network


def _link(f: Fields, key: str) -> Link:
    s = f.sub(key)
    return Link(type=s.text("type"), bandwidth_bytes_per_s=s.num("bandwidth_bytes_per_s", min_value=1),
                latency_s=s.num("latency_s", min_value=0))


def parse_hardware(data, src: str) -> Hardware:
    """Validate one hardware mapping; every missing or mistyped field names file and field."""
    f = Fields(data, src)
    c, m, ca, la, ef, ic, pw = (f.sub(k) for k in ("compute", "memory", "cache", "launch", "efficiency",
                                                    "interconnect", "power"))
    mf = c.sub("matrix_flops_per_s")
    matrix = {}
    for dt in DTYPES:
        matrix[dt] = mf.num(dt, required=dt in ("fp32", "fp16"), allow_null=True, min_value=0)
    modes = []
    for j, raw in enumerate(pw.items("modes", required=False)):
        mm = Fields(raw, src, f"power.modes[{j}]")
        modes.append(PowerMode(id=str(mm._get("id")), power_w=mm.num("power_w", min_value=0),
                               compute_scale=mm.num("compute_scale", min_value=0.01, max_value=1),
                               bandwidth_scale=mm.num("bandwidth_scale", min_value=0.01, max_value=1)))
    cap = m.num("capacity_bytes", min_value=1)
    usable = m.num("usable_bytes", min_value=1)
    if usable > cap:
        raise InputError(f"usable_bytes ({usable:.4g}) exceeds capacity_bytes ({cap:.4g})", source=src,
                         field="memory.usable_bytes")

    def eff(key):
        e = ef.sub(key)
        e.text("source")
        return e.num("value", min_value=0.01, max_value=1.0)   # a fraction of the datasheet

    sources = tuple(f.items("sources"))
    if not sources:
        raise InputError("must list at least one source", source=src, field="sources")
    return Hardware(
        id=f.text("id"), name=f.text("name"), vendor=f.text("vendor"), kind=f.text("kind"),
        sm_count=c.num("sm_count", integer=True, min_value=1), matrix_flops_per_s=matrix,
        vector_flops_per_s=c.num("vector_flops_per_s", min_value=1),
        memory_type=m.text("type"), capacity_bytes=cap, usable_bytes=usable,
        bandwidth_bytes_per_s=m.num("bandwidth_bytes_per_s", min_value=1),
        unified_with_cpu=m.flag("unified_with_cpu"),
        l2_bytes=ca.num("l2_bytes", min_value=0), l2_bandwidth_bytes_per_s=ca.num("l2_bandwidth_bytes_per_s", min_value=1),
        kernel_launch_s=la.num("kernel_launch_s", min_value=0), graph_kernel_launch_s=la.num("graph_kernel_launch_s", min_value=0),
        memory_efficiency=eff("memory_bandwidth"), matrix_efficiency=eff("matrix"),
        devices_per_node=ic.num("devices_per_node", integer=True, min_value=1),
        scale_up=_link(ic, "scale_up"), host=_link(ic, "host"), network=_link(ic, "network"),
        tdp_w=pw.num("tdp_w", min_value=0), power_modes=tuple(modes), sources=sources, source_file=src)


@functools.lru_cache(maxsize=256)
def _load_path(path: str) -> Hardware:
    return parse_hardware(load_yaml(path), path)


def load_hardware(id_or_path, power_mode: str | None = None, field: str = "hardware") -> Hardware:
    """Zoo id (case-insensitive) or path to a hardware YAML -> :class:`Hardware` (cached)."""
    hw = id_or_path if isinstance(id_or_path, Hardware) else _load_path(
        str(resolve("hardware_specs", id_or_path, field)))
    return hw.with_power_mode(power_mode)


#: numeric fields of Hardware that a HardwareStack holds as arrays over its members
_STACKED = ("sm_count", "vector_flops_per_s", "capacity_bytes", "usable_bytes", "bandwidth_bytes_per_s",
            "l2_bytes", "l2_bandwidth_bytes_per_s", "kernel_launch_s", "graph_kernel_launch_s",
            "memory_efficiency", "matrix_efficiency", "tdp_w")


@dataclass(frozen=True, eq=False)
class HardwareStack(Hardware):
    """Several devices as one :class:`Hardware` whose numbers are arrays along one axis of a sweep's
    grid (``shape``: 1 everywhere but that axis): every formula reads them as it reads one device's,
    so a pass is priced for all members in one array evaluation, element for element the same
    floating-point operations as for each member alone. Built by :func:`stack_hardware` from members
    that agree on everything the engine branches on for the record they serve
    (:func:`costmodel.engine.evaluate.hardware_signature`); the links are chosen device by device
    (``costmodel.engine.parallel``); ``devices_per_node`` is the first member's and is read only there."""

    members: tuple = ()
    shape: tuple = ()

    __hash__ = object.__hash__            # identity: its arrays are not hashable
    __eq__ = object.__eq__

    def matrix_peak(self, dtype: str):
        return np.asarray([m.matrix_peak(dtype) for m in self.members], dtype=float).reshape(self.shape)

    def supports(self, dtype: str) -> bool:
        return self.members[0].supports(dtype)

    def with_power_mode(self, mode_id: str | None) -> "Hardware":
        return self                       # the members were loaded in their power mode


def stack_hardware(members, shape) -> HardwareStack:
    """Members (one engine decision signature) as one :class:`HardwareStack`, arrays of ``shape``."""
    members = tuple(members)
    first = members[0]

    def arr(values, dtype=float):
        return np.asarray(values, dtype=dtype).reshape(shape)

    def link(name):
        ls = [getattr(m, name) for m in members]
        return Link(type=ls[0].type, bandwidth_bytes_per_s=arr([x.bandwidth_bytes_per_s for x in ls]),
                    latency_s=arr([x.latency_s for x in ls]))

    nums = {f: arr([getattr(m, f) for m in members], np.int64 if f == "sm_count" else float) for f in _STACKED}
    return HardwareStack(
        id=",".join(m.id for m in members), name=",".join(m.name for m in members), vendor=first.vendor,
        kind=first.kind, matrix_flops_per_s={}, memory_type=first.memory_type,
        unified_with_cpu=first.unified_with_cpu, devices_per_node=first.devices_per_node,
        scale_up=link("scale_up"), host=link("host"), network=link("network"),
        power_mode=first.power_mode, members=members, shape=tuple(shape), **nums)
