"""``costmodel probe``: a quick local profile written as a hardware YAML (hardware_specs/README.md schema).

The article's advice — "start with a lightweight profile anyway" — as a command. Measured:

* achievable memory bandwidth: the best of a few large array copies, counting read + write
  (bytes = 2 · array size per copy), arrays ≫ the last-level cache;
* matrix FLOP/s: the best of a few square matmuls, 2·n³ FLOPs each (fp32 on the CPU; fp16 and
  fp32 with PyTorch on a GPU);
* vector FLOP/s: fused multiply-add over an array that fits in cache (2 FLOPs per element);
* cache ("L2" in the model: the last-level cache on a CPU) bandwidth: copies of an array half its size;
* dispatch latency: the time of a tiny operation (numpy call or GPU kernel launch).

Measured bandwidth and FLOP/s *are* the achievable figures, so the file's efficiencies are 1.0
(with that stated as their source). A CPU has no fp16 matrix units numpy uses: the fp16 peak is
set to the measured fp32 rate and marked as such. Capacity comes from /proc/meminfo (CPU) or the
device properties (GPU). Runs in a few seconds (``quick``: about one).

Trust: every figure is the fastest of a few runs; ``spread`` gives slowest ÷ fastest per figure and
``trust`` says it in words. ``quick`` uses small sizes (a matmul of 512² on the CPU), which can put a
figure several times away from the full probe: the note says so and asks for a full run. The
bandwidth copy is always at least 4× the last-level cache, so it measures DRAM, not the cache.
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from costmodel.errors import InputError
from costmodel.inputs.outputs import atomic_open, check_output_path


def _best(fn, reps: int, spread: dict | None = None, key: str = "") -> float:
    """Fastest of ``reps`` timed calls (after one warm-up), seconds; ``spread[key]`` = slowest / fastest."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    best = max(min(times), 1e-9)
    if spread is not None:
        spread[key] = max(times) / best
    return best


#: a figure whose repetitions differ by more than this is flagged as noisy
NOISY_SPREAD = 1.5


def trust_note(m: dict, quick: bool) -> str:
    """How far the probe's figures can be trusted: each one's spread over its repetitions (slowest ÷
    fastest run; the figure is the fastest), the sizes used, and for ``quick`` the advice to rerun."""
    spread = m.get("spread", {})
    worst = max(spread.items(), key=lambda kv: kv[1], default=("", 1.0))
    noisy = [f"{k} {v:.1f}×" for k, v in sorted(spread.items(), key=lambda kv: -kv[1]) if v > NOISY_SPREAD]
    text = (f"{'quick probe: ' if quick else ''}each figure is the best of {m.get('reps', '?')} runs; runs of "
            f"one figure differed by up to {worst[1]:.1f}× ({worst[0]})")
    text += f"; noisy: {', '.join(noisy)} (another program was busy, or the sizes are too small)" if noisy else ""
    if quick:
        text += ("; quick sizes are small (" + m.get("sizes", "") + ") and can put a figure several times off the "
                 "full probe: run `costmodel probe` without --quick (a few seconds) before relying on the file")
    return text


def _meminfo() -> tuple[float, float]:
    total = avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                k, v = line.split(":", 1)
                if k == "MemTotal":
                    total = float(v.split()[0]) * 1024
                elif k == "MemAvailable":
                    avail = float(v.split()[0]) * 1024
    except OSError:
        pass
    if total is None:
        try:
            total = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            total = 8e9
    return total, min(avail or total * 0.8, total)


def _llc_bytes() -> float:
    """Largest cache of CPU 0 (Linux sysfs), else 8 MiB."""
    best = 0.0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for d in os.listdir(base):
            try:
                with open(os.path.join(base, d, "size"), encoding="ascii") as f:
                    s = f.read().strip().upper()
                mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(s[-1], 1)
                best = max(best, float(s.rstrip("KMG")) * mult)
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return best or 8.0 * 1024 ** 2


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def probe_cpu(quick: bool = False) -> dict:
    """Measure this CPU with numpy (see the module docstring)."""
    reps = 2 if quick else 4
    spread = {}
    llc = _llc_bytes()
    # float64 elements; at least 4× the last-level cache, or the copy measures the cache, not DRAM
    n_bw = max((32 if quick else 256) * 1024 ** 2, int(4 * llc)) // 8
    a = np.ones(n_bw)
    b = np.empty_like(a)
    t = _best(lambda: np.copyto(b, a), reps, spread, "bandwidth")
    bw = 2.0 * a.nbytes / t
    del a, b
    n = 512 if quick else 1536
    x = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    y = x.copy()
    tm = _best(lambda: x @ y, reps, spread, "matrix")
    mm = 2.0 * n ** 3 / tm
    m = max(1024, int(min(llc, 8 * 1024 ** 2) / 4 / 4))       # float32: two arrays in half the cache (≤ 8 MiB)
    v = np.ones(m, dtype=np.float32)
    w = np.empty_like(v)
    tv = _best(lambda: np.multiply(v, 1.0001, out=w), reps * 4, spread, "vector")
    vec = m / tv                                                # one multiply per element (numpy has no FMA)
    tl = _best(lambda: np.copyto(w, v), reps * 4, spread, "cache_bandwidth")
    l2bw = 2.0 * v.nbytes / tl
    tiny = np.ones(8)
    tk = _best(lambda: np.add(tiny, tiny), 50)
    total, avail = _meminfo()
    return {"kind": "cpu", "name": f"{_cpu_name()} (numpy probe)", "vendor": "cpu", "sm_count": os.cpu_count() or 1,
            "bandwidth": bw, "matrix_fp32": mm, "matrix_fp16": mm, "vector": max(vec, 1.0), "l2_bytes": llc,
            "l2_bandwidth": max(l2bw, bw), "launch": tk, "capacity": total, "usable": avail,
            "memory_type": "host DRAM", "unified": True, "tdp_w": 0, "spread": spread, "reps": reps,
            "sizes": f"copy {n_bw * 8 / 2 ** 20:.0f} MiB, matmul {n}×{n}",
            "method": f"numpy {np.__version__}: copy of {n_bw * 8 / 2 ** 20:.0f} MiB float64 arrays (read + write "
                      f"counted), {n}x{n} float32 matmul, {m * 4 / 2 ** 20:.2f} MiB in-cache arrays",
            "fp16_note": "no fp16 matrix path in numpy: the fp16 figure is the measured fp32 matmul rate"}


def probe_gpu(quick: bool = False):
    """Measure GPU 0 with PyTorch, or None when PyTorch or a GPU is missing."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda:0")
    props = torch.cuda.get_device_properties(dev)

    spread = {}

    def timed(fn, reps, key=""):
        return _cuda_best_time(torch, fn, reps, spread, key)

    reps = 3 if quick else 10
    nb = (256 if quick else 1024) * 1024 ** 2
    a = torch.empty(nb // 2, dtype=torch.float16, device=dev)
    b = torch.empty_like(a)
    bw = 2.0 * nb / timed(lambda: b.copy_(a), reps, "bandwidth")
    del a, b
    n = 4096 if quick else 8192
    x = torch.randn(n, n, dtype=torch.float16, device=dev)
    f16 = 2.0 * n ** 3 / timed(lambda: x @ x, reps, "matrix")
    n32 = n // 2
    x32 = torch.randn(n32, n32, dtype=torch.float32, device=dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    f32 = 2.0 * n32 ** 3 / timed(lambda: x32 @ x32, reps)
    del x, x32
    l2 = float(getattr(props, "L2_cache_size", 0) or 0) or 40e6
    m = max(1024, int(l2 / 4 / 2))
    v = torch.ones(m, dtype=torch.float16, device=dev)
    w = torch.empty_like(v)
    l2bw = 2.0 * v.numel() * 2 / timed(lambda: w.copy_(v), reps * 5)
    big = torch.ones(64 * 1024 ** 2 // 4, dtype=torch.float32, device=dev)
    vec = 2.0 * big.numel() / timed(lambda: torch.addcmul(big, big, big), reps)   # bandwidth-bound lower bound
    tiny = torch.ones(8, device=dev)
    launch = timed(lambda: tiny.add_(1.0), 50)
    free, total = torch.cuda.mem_get_info(dev)
    return {"kind": "gpu", "name": f"{props.name} (PyTorch probe)",
            "vendor": "amd" if getattr(torch.version, "hip", None) else "nvidia",
            "sm_count": int(props.multi_processor_count), "bandwidth": bw, "matrix_fp32": f32, "matrix_fp16": f16,
            "vector": vec, "l2_bytes": l2, "l2_bandwidth": max(l2bw, bw), "launch": launch,
            "capacity": float(props.total_memory), "usable": float(total), "memory_type": "device memory",
            "unified": False, "tdp_w": 0, "spread": spread, "reps": reps,
            "sizes": f"copy {nb / 2 ** 20:.0f} MiB, fp16 matmul {n}×{n}",
            "method": f"PyTorch {torch.__version__}: copy of {nb / 2 ** 20:.0f} MiB, {n}x{n} fp16 and {n32}x{n32} "
                      "fp32 (TF32 off) matmuls, CUDA events",
            "fp16_note": "measured fp16 matmul (fp32 accumulate)"}


def _cuda_best_time(torch, fn, reps: int, spread: dict, key: str = "") -> float:
    """Best of ``reps`` runs of ``fn`` on the GPU (after one warm-up), timed with CUDA events, in
    seconds; with ``key``, the spread (slowest / best) goes into ``spread[key]``."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    best = max(min(times), 1e-9)
    if key:
        spread[key] = max(times) / best
    return best


def _r(x: float) -> float:
    return float(f"{float(x):.4g}")


def to_hardware_yaml(m: dict, hw_id: str) -> dict:
    """The measurement as a hardware mapping that :func:`costmodel.load_hardware` accepts."""
    rates = ("bandwidth", "matrix_fp32", "matrix_fp16", "vector", "l2_bandwidth", "launch")
    m = {k: (_r(v) if k in rates else v) for k, v in m.items()}      # capacities stay exact
    src = {"id": "costmodel_probe", "title": f"costmodel probe on this machine: {m['method']}", "url": "local measurement"}
    link = {"type": "none measured (single device)", "bandwidth_bytes_per_s": float(m["bandwidth"]), "latency_s": 1.0e-5}
    return {
        "id": hw_id, "name": m["name"], "vendor": m["vendor"], "kind": m["kind"], "architecture": "probed",
        "release_year": int(time.strftime("%Y")),
        "compute": {"sm_count": int(m["sm_count"]),
                    "matrix_flops_per_s": {"fp32": float(m["matrix_fp32"]), "tf32": None,
                                           "fp16": float(m["matrix_fp16"]), "bf16": float(m["matrix_fp16"]),
                                           "fp8": None, "int8": None, "int4": None},
                    "vector_flops_per_s": float(m["vector"])},
        "memory": {"type": m["memory_type"], "capacity_bytes": float(m["capacity"]),
                   "usable_bytes": float(min(m["usable"], m["capacity"])),
                   "usable_basis": "measured: MemAvailable (CPU) or cudaMemGetInfo total (GPU) at probe time",
                   "bandwidth_bytes_per_s": float(m["bandwidth"]), "unified_with_cpu": bool(m["unified"])},
        "cache": {"l2_bytes": float(m["l2_bytes"]), "l2_bandwidth_bytes_per_s": float(m["l2_bandwidth"]),
                  "l2_basis": "CPU: the last-level cache from sysfs; GPU: device properties; bandwidth measured by "
                              "copies of an array half its size"},
        "launch": {"kernel_launch_s": float(m["launch"]), "graph_kernel_launch_s": float(m["launch"]),
                   "basis": "measured: fastest tiny operation (numpy call / GPU kernel)"},
        "efficiency": {"memory_bandwidth": {"value": 1.0, "source": "measured: the bandwidth above is already the "
                                                                      "achievable copy bandwidth"},
                       "matrix": {"value": 1.0, "source": "measured: the FLOP/s above are already achieved matmul rates; "
                                                            + m["fp16_note"]}},
        "interconnect": {"devices_per_node": 1, "scale_up": dict(link), "host": dict(link), "network": dict(link)},
        "power": {"tdp_w": int(m["tdp_w"]), "modes": []},
        "sources": [src],
        "notes": "Written by `costmodel probe`; re-run it after changing the machine. Values are this run's best "
                 "of a few repetitions, not datasheet peaks; bf16 copies fp16. Links are placeholders.",
    }


def probe(output=None, *, quick: bool = False, device: str = "auto", hw_id: str = "probed") -> dict:
    """Measure this machine and (with ``output``) write its hardware YAML. ``device``: auto|cpu|gpu.
    Returns {"measured": {...}, "hardware": mapping, "output": path or None, "seconds": runtime}."""
    if device not in ("auto", "cpu", "gpu"):
        raise InputError(f"unknown device {device!r}", field="device", allowed="auto, cpu, gpu")
    if output:
        output = check_output_path(output, (".yaml", ".yml"), field="--output")     # before measuring
    t0 = time.perf_counter()
    m = None
    if device in ("auto", "gpu"):
        m = probe_gpu(quick)
        if m is None and device == "gpu":
            raise InputError("no GPU probe possible: PyTorch with a visible GPU is needed", field="device",
                             allowed="cpu, or install PyTorch with GPU support")
    if m is None:
        m = probe_cpu(quick)
    note = trust_note(m, quick)
    hw = to_hardware_yaml({k: v for k, v in m.items() if k not in ("spread", "reps", "sizes")}, hw_id)
    hw["notes"] += " Trust: " + note + "."
    from costmodel.inputs.hardware import parse_hardware
    parse_hardware(hw, "probe")                        # what we write must load
    if output:
        import yaml
        with atomic_open(output, "w") as f:
            f.write("# Hardware profile measured by `costmodel probe` (schema: hardware_specs/README.md).\n")
            yaml.safe_dump(hw, f, sort_keys=False, allow_unicode=True, width=110)
    return {"measured": {k: v for k, v in m.items() if k not in ("method", "fp16_note", "spread", "reps", "sizes")},
            "hardware": hw, "output": str(output) if output else None, "seconds": time.perf_counter() - t0,
            "quick": bool(quick), "spread": dict(m.get("spread", {})), "trust": note}
