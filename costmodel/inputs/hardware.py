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

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")   # fp4: NVFP4/MXFP4 block-scaled


@dataclass(frozen=True)
class Link:
    """One interconnect: ``bandwidth_bytes_per_s`` the datasheet rate per direction (β of point-to-point
    sends and of the peer-to-peer kernels), ``latency_s`` the per-step latency α, and
    ``collective_bandwidth_bytes_per_s`` the bus bandwidth NCCL/RCCL's ring and tree all-reduces reach
    on it at large messages (nccl-tests ``all_reduce_perf`` busbw; YAML
    ``collective_bandwidth_bytes_per_s: {value, source}``); None = the datasheet rate."""
    type: str
    bandwidth_bytes_per_s: float
    latency_s: float
    collective_bandwidth_bytes_per_s: float | None = None

    @property
    def collective_beta_bytes_per_s(self):
        """β of the NCCL ring/tree all-reduce: the measured busbw where recorded, else the datasheet rate."""
        c = self.collective_bandwidth_bytes_per_s
        return self.bandwidth_bytes_per_s if c is None else c


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
    #: ((dtype, fraction), ...): a measured large-GEMM fraction for a matrix dtype whose kernels reach a
    #: different share of their peak than the fp16/bf16 ones ``matrix_efficiency`` measures (YAML
    #: ``efficiency.matrix_fp8``); a dtype not listed uses ``matrix_efficiency``
    matrix_efficiency_by_dtype: tuple = ()
    #: the share of the dense matrix peak that Ampere-style kernels (warp-level ``mma.sync``, the
    #: instruction before Hopper's ``wgmma``) can issue (YAML ``efficiency.matrix_mma_sync``); 1 where
    #: ``mma.sync`` is the native instruction or no measurement is recorded
    mma_sync_matrix_fraction: float = 1.0
    sources: tuple = field(default=(), compare=False)
    source_file: str = ""

    def matrix_peak(self, dtype: str) -> float:
        """Dense matrix FLOP/s for ``dtype``; falls back to the FP32 vector rate when unsupported."""
        v = self.matrix_flops_per_s.get(dtype)
        return float(v) if v else self.vector_flops_per_s

    def matrix_efficiency_for(self, dtype: str) -> float:
        """The measured fraction of ``dtype``'s dense peak a large GEMM reaches: the dtype's own
        measurement where the spec has one (``efficiency.matrix_fp8``), else ``matrix_efficiency``
        (measured with fp16/bf16 GEMMs)."""
        return dict(self.matrix_efficiency_by_dtype).get(dtype, self.matrix_efficiency)

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


# Physical ranges of the spec values: wide enough for any real device (a microcontroller to a
# wafer-scale part), narrow enough that every product and quotient the engine forms stays finite
# (a FLOP rate of 1e-300 or a launch time of 1e308 s would overflow to inf or underflow to 0).
RATE = dict(min_value=1e6, max_value=1e18)          # FLOP/s: 1 MFLOP/s .. 1 EFLOP/s per device
BANDWIDTH = dict(min_value=1e6, max_value=1e16)     # bytes/s: 1 MB/s .. 10 PB/s
LINK = dict(min_value=1e3, max_value=1e15)          # bytes/s of an interconnect link
BYTES = dict(min_value=1e6, max_value=1e15)         # device memory: 1 MB .. 1 PB
SECONDS = dict(min_value=0, max_value=1.0)          # a launch or link latency over 1 s is a unit mistake
WATTS = dict(min_value=0, max_value=1e5)

HW_KEYS = {
    "": ("id", "name", "vendor", "kind", "architecture", "release_year", "compute", "memory", "cache", "launch",
         "efficiency", "interconnect", "power", "sources", "notes"),
    "compute": ("sm_count", "matrix_flops_per_s", "vector_flops_per_s"),
    "memory": ("type", "capacity_bytes", "usable_bytes", "bandwidth_bytes_per_s", "unified_with_cpu", "usable_basis"),
    "cache": ("l2_bytes", "l2_bandwidth_bytes_per_s", "l2_basis"),
    "launch": ("kernel_launch_s", "graph_kernel_launch_s", "basis"),
    "efficiency": ("memory_bandwidth", "matrix", "matrix_fp8", "matrix_mma_sync"),
    "interconnect": ("devices_per_node", "scale_up", "host", "network"),
    "power": ("tdp_w", "modes"),
}
"""Allowed keys per section (``*_basis``, ``basis``, ``notes``: documentary text, never read)."""
#: matrix rates recorded in the specs for completeness but not read (no record dtype uses them)
DOCUMENTED_DTYPES = ("fp4",)
LINK_KEYS = ("type", "bandwidth_bytes_per_s", "latency_s", "collective_bandwidth_bytes_per_s")
MODE_KEYS = ("id", "power_w", "compute_scale", "bandwidth_scale", "basis")


def _link(f: Fields, key: str) -> Link:
    s = f.sub(key)
    s.check_keys(LINK_KEYS)
    beta = s.num("bandwidth_bytes_per_s", **LINK)
    coll = None
    if "collective_bandwidth_bytes_per_s" in s.data:
        # measured all-reduce bus bandwidth: above 0 and at most the link's datasheet rate (a ring's busbw is
        # the bytes each link carries per second, which cannot exceed the wire)
        c = s.sub("collective_bandwidth_bytes_per_s")
        c.check_keys(("value", "source", "basis"))
        c.text("source")
        coll = c.num("value", **LINK)
        if coll > beta:
            raise InputError(f"must be <= the link's bandwidth_bytes_per_s ({beta:.4g}; a ring all-reduce's bus "
                             f"bandwidth cannot exceed the wire rate), got {coll:.4g}", source=c.source,
                             field=c._name("value"))
    return Link(type=s.text("type"), bandwidth_bytes_per_s=beta, latency_s=s.num("latency_s", **SECONDS),
                collective_bandwidth_bytes_per_s=coll)


def parse_hardware(data, src: str) -> Hardware:
    """Validate one hardware mapping; every missing or mistyped field names file and field, an
    unknown key is refused (with the closest allowed one), and every number is in its physical range."""
    f = Fields(data, src)
    f.check_keys(HW_KEYS[""])
    c, m, ca, la, ef, ic, pw = (f.sub(k) for k in ("compute", "memory", "cache", "launch", "efficiency",
                                                    "interconnect", "power"))
    for sec, name in ((c, "compute"), (m, "memory"), (ca, "cache"), (la, "launch"), (ef, "efficiency"),
                      (ic, "interconnect"), (pw, "power")):
        sec.check_keys(HW_KEYS[name])
    mf = c.sub("matrix_flops_per_s")
    mf.check_keys(DTYPES + DOCUMENTED_DTYPES)
    matrix = {}
    for dt in DTYPES:
        matrix[dt] = mf.num(dt, required=dt in ("fp32", "fp16"), allow_null=True, **RATE)
    modes = []
    for j, raw in enumerate(pw.items("modes", required=False)):
        mm = Fields(raw, src, f"power.modes[{j}]")
        mm.check_keys(MODE_KEYS)
        modes.append(PowerMode(id=mm.text("id"), power_w=mm.num("power_w", **WATTS),
                               compute_scale=mm.num("compute_scale", min_value=0.01, max_value=1),
                               bandwidth_scale=mm.num("bandwidth_scale", min_value=0.01, max_value=1)))
    cap = m.num("capacity_bytes", **BYTES)
    usable = m.num("usable_bytes", **BYTES)
    if usable > cap:
        raise InputError(f"usable_bytes ({usable:.4g}) exceeds capacity_bytes ({cap:.4g})", source=src,
                         field="memory.usable_bytes")

    def eff(key):
        e = ef.sub(key)
        e.check_keys(("value", "source", "basis"))
        e.text("source")
        return e.num("value", min_value=0.01, max_value=1.0)   # a fraction of the datasheet

    sources = tuple(f.items("sources"))
    if not sources:
        raise InputError("must list at least one source", source=src, field="sources")
    return Hardware(
        id=f.text("id"), name=f.text("name"), vendor=f.text("vendor"), kind=f.text("kind"),
        sm_count=c.num("sm_count", integer=True, min_value=1, max_value=1 << 20), matrix_flops_per_s=matrix,
        vector_flops_per_s=c.num("vector_flops_per_s", **RATE),
        memory_type=m.text("type"), capacity_bytes=cap, usable_bytes=usable,
        bandwidth_bytes_per_s=m.num("bandwidth_bytes_per_s", **BANDWIDTH),
        unified_with_cpu=m.flag("unified_with_cpu"),
        l2_bytes=ca.num("l2_bytes", min_value=0, max_value=1e10),
        l2_bandwidth_bytes_per_s=ca.num("l2_bandwidth_bytes_per_s", **BANDWIDTH),
        kernel_launch_s=la.num("kernel_launch_s", **SECONDS), graph_kernel_launch_s=la.num("graph_kernel_launch_s", **SECONDS),
        memory_efficiency=eff("memory_bandwidth"), matrix_efficiency=eff("matrix"),
        matrix_efficiency_by_dtype=(("fp8", eff("matrix_fp8")),) if "matrix_fp8" in ef.data else (),
        mma_sync_matrix_fraction=eff("matrix_mma_sync") if "matrix_mma_sync" in ef.data else 1.0,
        devices_per_node=ic.num("devices_per_node", integer=True, min_value=1, max_value=4096),
        scale_up=_link(ic, "scale_up"), host=_link(ic, "host"), network=_link(ic, "network"),
        tdp_w=pw.num("tdp_w", **WATTS), power_modes=tuple(modes), sources=sources, source_file=src)


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
            "memory_efficiency", "matrix_efficiency", "mma_sync_matrix_fraction", "tdp_w")


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

    def matrix_efficiency_for(self, dtype: str):
        return np.asarray([m.matrix_efficiency_for(dtype) for m in self.members], dtype=float).reshape(self.shape)

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
                    latency_s=arr([x.latency_s for x in ls]),
                    collective_bandwidth_bytes_per_s=arr([x.collective_beta_bytes_per_s for x in ls]))

    nums = {f: arr([getattr(m, f) for m in members], np.int64 if f == "sm_count" else float) for f in _STACKED}
    return HardwareStack(
        id=",".join(m.id for m in members), name=",".join(m.name for m in members), vendor=first.vendor,
        kind=first.kind, matrix_flops_per_s={}, memory_type=first.memory_type,
        unified_with_cpu=first.unified_with_cpu, devices_per_node=first.devices_per_node,
        scale_up=link("scale_up"), host=link("host"), network=link("network"),
        power_mode=first.power_mode, members=members, shape=tuple(shape), **nums)
