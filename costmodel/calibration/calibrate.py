"""Calibration of the runtime profiles against the validation data, with honest held-out errors.

What is fitted: a few parameters per runtime (``FIT_PARAMS``) — never per row, never the hardware
efficiencies (those are sourced measurements). Each runtime's parameters are fitted on the
calibration rows of that runtime only, minimising the soft-L1 loss of the log errors

    r_i(θ) = ln(predicted_i(θ) / measured_i)          (scale 0.1: a row off by > ~10 % counts linearly)

with a grid search (every row evaluated for all grid points in one numpy-vectorised call), a finer
grid around the best point, then ``scipy.optimize.least_squares`` (trust-region reflective, bounds
``BOUNDS``). Size metrics (weights, KV, peak memory) do not depend on these parameters and are not
used in the fit.

Held-out error: leave-one-publication-out (the headline: a user's setup is a new publication). The
rows of one publication (``Measurement.publication``: a paper, README or benchmark collection) are
removed, every runtime that has rows in it is refitted on the remaining rows, and its rows are
predicted with those parameters. A runtime with no calibration rows left falls back to ``PRIORS``
(values not derived from the validation data). ``by="group"`` holds out one table at a time instead
(less strict: other tables of the same publication stay in the fit; reported alongside).

The parameters written to ``runtimes/*.yaml`` are the fit on all calibration rows; the held-out
errors estimate how that procedure generalises to measurements it did not see.

What the fitted parameters stand for (see validation/REPORT.md for values):

* eager ``host_per_kernel_s``: Python/ATen dispatch cost per kernel launch (the host issues kernels
  asynchronously; a pass is host-bound when Σ host > Σ device).
* eager ``kernels_per_pass``: per-forward host work expressed in kernel-launch equivalents (HF
  module dispatch, mask and cache bookkeeping, logits processing): it also applies to every draft
  pass, which is what makes eager draft passes expensive.
* eager ``compute_efficiency``: what the research code's GEMMs reach of the hardware's large-GEMM
  rate beyond the overlap of math and weight stream near the ridge, which the model now has
  (roofline.gemm_overlap, √(c² + m²), fitted to A100 GEMM-shape data, not to these rows): ~0.5,
  for HF modules in eager mode (unfused epilogues, fp32 accumulation paths). See REPORT.md.
* (not fitted) host work per speculative or tree step beyond its forward passes: the runtime's
  counted operations and device-to-host syncs per method (``spec_step_host_ops``,
  ``spec_step_syncs``: candidates, acceptance, KV compaction), priced at ``host_per_kernel_s`` and
  the hardware's launch + host-link latency. A parameter the fold's rows cannot see (moving it over
  its range moves no prediction by 2 %) keeps its prior (:func:`identifiable`).
* ``bandwidth_efficiency``: achieved fraction of the hardware's measured stream bandwidth for the
  runtime's decode kernels; ``step_overhead_s``: per-step host work (scheduler, sampling).
* vLLM ``step_overhead_per_rank_s``: per-step host work per worker rank beyond the first. vLLM V1
  runs one worker process per device above one (the multiprocess executor): every step's schedule is
  handed to each rank, each prepares its own inputs and samples, and the step waits for the last
  (the V0 entries, ``vllm@0.5``/``0.6``, set their own figure: 0, none is published). Without it the fit learns one constant from
  the 8-GPU MI300X rows (32 of vLLM's calibration rows) and charges it to one-GPU engines too. The V0
  entries set their own ``step_overhead_s`` too (0: their host work is the sourced ``host_step_s`` and
  ``host_per_seq_s``), so V0 rows calibrate only the bandwidth and never teach V1 a step overhead
  (they did when the MI300X publication was held out: 7 ms from four 2023 rows).
* llama.cpp ``sm_bandwidth_bytes_per_s``: what one SM's share of ggml's GEMV kernels streams (its
  bytes in flight over the DRAM latency, Little's law; the latency is taken as the same on every GPU,
  so the cap scales with ``sm_count``). It is why llama.cpp reaches ~1.0 TB/s on both the A100 and
  the H100 PCIe (2 TB/s parts) for f16 and Q4 alike but ~0.85 of the RTX 4090's 1 TB/s.
* llama.cpp ``host_per_kernel_s``: CPU time per ggml graph node launched (no CUDA graphs in the
  measured releases). A pass costs max(device, host), so it only binds small models: 7B Q4 decode
  measures ~135 tok/s on both an A100 and an H100 PCIe, a GPU-independent ceiling.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel.inputs.runtime import Runtime, load_runtime, split_version
from costmodel.calibration.validate import SIZE_METRICS, Measurement, load_measurements, predict, predict_arrays, row_result

#: parameters fitted per runtime (the rest keep their YAML values)
FIT_PARAMS = {
    "eager": ("host_per_kernel_s", "compute_efficiency"),
    "compiled": ("bandwidth_efficiency", "step_overhead_s"),
    "llama.cpp": ("bandwidth_efficiency", "host_per_kernel_s", "sm_bandwidth_bytes_per_s"),
    "trt-llm": ("bandwidth_efficiency", "step_overhead_s"),
    "vllm": ("bandwidth_efficiency", "step_overhead_s", "step_overhead_per_rank_s"),
    "mlc": ("bandwidth_efficiency", "step_overhead_s"),
}
#: (low, high, typical scale) of each parameter: physical bounds (efficiencies in (0, 1], so that
#: no achievable rate exceeds the datasheet; overheads >= 0), the same as the loaders enforce
BOUNDS = {
    "bandwidth_efficiency": (0.3, 1.0, 1.0),      # a fraction of the hardware's measured stream rate
    "compute_efficiency": (0.05, 1.0, 1.0),       # a fraction of its measured GEMM rate
    "host_per_kernel_s": (0.0, 1.0e-4, 1.0e-5),
    "step_overhead_s": (0.0, 2.0e-2, 1.0e-3),
    "step_overhead_per_rank_s": (0.0, 2.0e-3, 1.0e-4),    # per worker rank beyond the first
    "kernels_per_pass": (0.0, 1500.0, 100.0),
    "spec_step_overhead_s": (0.0, 2.0e-2, 1.0e-3),
    "sm_bandwidth_bytes_per_s": (2.0e9, 4.0e10, 1.0e10),
}
#: Starting values, and the values a runtime keeps when a fold leaves it no calibration rows.
#: Deliberately not derived from the validation data: efficiencies 1.0 (= the hardware's measured
#: achievable figures), overheads the order-of-magnitude priors of the runtime files.
PRIORS = {
    # eager compute_efficiency 1.0: the hardware files' GEMM fractions are what torch.mm / cuBLAS reach
    # at prefill-sized shapes (the A100's 0.84: LLMCompass M=2048, N=K=12288; torch.mm 0.83-0.85)
    "eager": {"host_per_kernel_s": 2.0e-5, "kernels_per_pass": 40.0, "compute_efficiency": 1.0,
              "step_overhead_s": 5.0e-4, "bandwidth_efficiency": 1.0, "spec_step_overhead_s": 0.0},
    "compiled": {"bandwidth_efficiency": 1.0, "step_overhead_s": 5.0e-5, "compute_efficiency": 1.0},
    "llama.cpp": {"bandwidth_efficiency": 1.0, "step_overhead_s": 2.0e-4, "compute_efficiency": 0.8,
                  "host_per_kernel_s": 4.0e-6, "sm_bandwidth_bytes_per_s": 4.0e10},
    "trt-llm": {"bandwidth_efficiency": 1.0, "step_overhead_s": 3.0e-4, "compute_efficiency": 1.0},
    "vllm": {"bandwidth_efficiency": 1.0, "step_overhead_s": 1.5e-3, "compute_efficiency": 1.0,
             "step_overhead_per_rank_s": 2.0e-4},
    "mlc": {"bandwidth_efficiency": 0.9, "step_overhead_s": 3.0e-4, "compute_efficiency": 0.9},
}
GRID_POINTS = 13         # per parameter in the start grid
REFINE_POINTS = 7        # per parameter in the refinement grid around the best grid point
MAX_NFEV = 6             # least_squares evaluations after the grids
F_SCALE = 0.1            # soft-L1 scale of the log residuals (~10 %)


#: switches for the ablation table (a mechanism is on unless :data:`ABLATIONS` turns it off)
SPEC_HOST_WORK = True        # the runtimes' counted per-step host work of speculation
KEEP_UNSEEN_PRIORS = True    # parameters a fold's rows cannot see keep their priors
GQA_KERNELS = True           # the runtimes' GQA-unaware attention kernels (eager repeat_kv)
PREFILL_PER_SEQUENCE = True  # runtimes that prefill one prompt per pass
CUSTOM_ALLREDUCE = True      # runtimes' own tensor-parallel all-reduce kernels (tp_allreduce: custom)
UNFUSED_TREE_ATTENTION = True  # research code's tree attention computed op by op
FP16_ATTENTION = True        # fp8 engines' attention in fp16 where the runtime has no fp8 attention kernels


def prior_runtime(rt_id: str) -> Runtime:
    """The runtime profile with its ``PRIORS`` values (the starting point and the fallback)."""
    base = load_runtime(rt_id)
    if not SPEC_HOST_WORK:
        base = dataclasses.replace(base, spec_step_host_ops=(), spec_step_syncs=())
    if not GQA_KERNELS:
        base = dataclasses.replace(base, gqa_attention="grouped")
    if not PREFILL_PER_SEQUENCE:
        base = dataclasses.replace(base, prefill_per_sequence=False)
    if not CUSTOM_ALLREDUCE:
        base = dataclasses.replace(base, tp_allreduce="auto")
    if not UNFUSED_TREE_ATTENTION:
        base = dataclasses.replace(base, tree_attention_kernels_per_layer=None)
    if not FP16_ATTENTION:
        base = dataclasses.replace(base, fp8_context_fmha=True)
    return dataclasses.replace(base, **PRIORS.get(rt_id, {}))


def with_params(rt: Runtime, names, values) -> Runtime:
    return dataclasses.replace(rt, **{n: (float(v) if np.ndim(v) == 0 else np.asarray(v, float))
                                      for n, v in zip(names, values)})


def fit_rows(ms: list[Measurement]) -> list[Measurement]:
    """Rows the runtime parameters can move (timing metrics, numeric) and that may calibrate them
    (``Measurement.calibrate``: not a measurement that holds work outside its configuration)."""
    return [m for m in ms if m.metric not in SIZE_METRICS and not m.categorical and m.calibrate]


class _Evaluator:
    """Predictions of one runtime's rows for many parameter vectors at once (numpy-vectorised)."""

    def __init__(self, rt_id: str, ms: list[Measurement], names=None):
        self.rt_id, self.ms = rt_id, ms
        self.names = tuple(FIT_PARAMS.get(rt_id, ()) if names is None else names)
        self.base = prior_runtime(rt_id)
        self.scale = np.asarray([BOUNDS[n][2] for n in self.names])
        self.log_meas = np.log([m.value for m in ms])

    def preds(self, thetas: np.ndarray) -> np.ndarray:
        """(rows, K) predictions for K parameter vectors ``thetas`` (K, p) in physical units."""
        K = len(thetas)
        rt = with_params(self.base, self.names, thetas.T)
        out = np.empty((len(self.ms), K))
        for i, m in enumerate(self.ms):
            try:
                v = np.asarray(predict_arrays(m, {self.rt_id: rt},
                                              {"batch_size": np.full(K, float(m.record.batch_size))}), float)
                if v.shape != (K,):
                    raise ValueError("shape")
            except Exception as exc:   # an engine path that is not vectorised: one parameter vector at a time
                _warn_scalar(m, exc)
                v = np.asarray([predict(m, {self.rt_id: with_params(self.base, self.names, th)})
                                for th in thetas], float)
            out[i] = v
        return out

    def residuals(self, thetas: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(self.preds(thetas), 1e-30)) - self.log_meas[:, None]


_WARNED: set = set()


def _warn_scalar(m: Measurement, exc: Exception) -> None:
    """The fit evaluates all parameter vectors in one call by giving the runtime array-valued fields;
    an engine change that breaks this makes calibration ~100x slower: say so once."""
    import warnings
    key = type(exc).__name__
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(f"calibrate: vectorised evaluation failed for {m.id} ({type(exc).__name__}: {exc}); "
                      "falling back to one evaluation per parameter vector (slow)", RuntimeWarning, stacklevel=3)


def _soft_l1(r):
    z = (r / F_SCALE) ** 2
    return 2.0 * (np.sqrt(1.0 + z) - 1.0)


def _grid(names) -> np.ndarray:
    lo = [BOUNDS[n][0] for n in names]
    hi = [BOUNDS[n][1] for n in names]
    axes = [np.linspace(a, b, GRID_POINTS) for a, b in zip(lo, hi)]
    return np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)


def fit_runtime(rt_id: str, ms: list[Measurement], grid_cache: dict | None = None, *,
                max_nfev: int = MAX_NFEV) -> dict:
    """Fit ``FIT_PARAMS[rt_id]`` on the runtime's calibration rows in ``ms``: the best point of a grid
    (predictions cached per row in ``grid_cache``, so refitting a fold costs no new grid), then
    ``scipy.optimize.least_squares`` from there. No rows (or no parameters): the priors."""
    all_names = FIT_PARAMS.get(rt_id, ())
    rows = [m for m in fit_rows(ms) if m.runtime == rt_id]
    prior = PRIORS.get(rt_id, {})
    if not rows or not all_names:
        return {"params": {n: prior.get(n) for n in all_names}, "n_rows": 0, "rows": [], "fitted": False}
    names = identifiable(rt_id, rows, all_names)
    kept = {n: prior.get(n) for n in all_names if n not in names}
    if not names:
        return {"params": kept, "n_rows": len(rows), "rows": [m.id for m in rows], "fitted": False, "kept_prior": sorted(kept)}
    ev = _Evaluator(rt_id, rows, names)
    lo = np.asarray([BOUNDS[n][0] for n in names])
    hi = np.asarray([BOUNDS[n][1] for n in names])
    start, loss = _grid_start(rt_id, rows, names, ev, lo, hi, grid_cache)
    theta, cost, rms = start, float(0.5 * F_SCALE ** 2 * loss.min()), None
    if max_nfev:
        x0 = np.clip(start / ev.scale, lo / ev.scale + 1e-9, hi / ev.scale - 1e-9)
        theta, cost, rms = _least_squares(ev, x0, lo, hi, max_nfev)
    # a parameter that ends on its bound is reported as the bound (not as 1e-16 of numerical noise)
    span = hi - lo
    theta = np.where(np.abs(theta - lo) < 1e-6 * span, lo, np.where(np.abs(theta - hi) < 1e-6 * span, hi, theta))
    params = {n: float(v) for n, v in zip(names, theta)}
    params.update(kept)
    return {"params": {n: params[n] for n in all_names}, "n_rows": len(rows),
            "rows": [m.id for m in rows], "fitted": True, "cost": cost, "rms_log_error": rms,
            "kept_prior": sorted(kept)}


def _grid_start(rt_id: str, rows: list, names: tuple, ev, lo, hi, grid_cache) -> tuple:
    """(start point, loss per point of its grid): the best point of the start grid (each row's
    predictions cached in ``grid_cache``), or of a finer grid over its neighbouring cells if better."""
    grid = _grid(names)
    cache = {} if grid_cache is None else grid_cache
    res_rows = []
    for m, lm in zip(rows, ev.log_meas):
        key = (rt_id, m.id, names)
        if key not in cache:
            cache[key] = _Evaluator(rt_id, [m], names).preds(grid)[0]
        res_rows.append(np.log(np.maximum(cache[key], 1e-30)) - lm)
    loss = _soft_l1(np.asarray(res_rows)).sum(axis=0)
    start = grid[np.argmin(loss)]
    # refine: a finer grid over the neighbouring cells, all rows in one vectorised call each
    step = (hi - lo) / (GRID_POINTS - 1)
    axes = [np.clip(np.linspace(start[j] - step[j], start[j] + step[j], REFINE_POINTS), lo[j], hi[j])
            for j in range(len(names))]
    fine = np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], axis=1)
    fine_loss = _soft_l1(ev.residuals(fine)).sum(axis=0)
    if fine_loss.min() < loss.min():
        start, loss = fine[np.argmin(fine_loss)], fine_loss
    return start, loss


def _least_squares(ev, x0, lo, hi, max_nfev: int) -> tuple:
    """(θ, cost, rms log error) of ``scipy.optimize.least_squares`` (soft-L1, bounded) from ``x0`` in
    scaled units, with the Jacobian by forward differences from the same vectorised evaluation."""
    from scipy.optimize import least_squares
    h = 1e-4
    memo = {}

    def both(x):
        # residuals at x and at x + h·e_j in one vectorised evaluation (the Jacobian comes free)
        k = tuple(np.round(x, 12))
        if k not in memo:
            pts = [x] + [x + h * np.eye(len(x))[j] for j in range(len(x))]
            r = ev.residuals(np.asarray(pts) * ev.scale)
            memo.clear()
            memo[k] = (r[:, 0], (r[:, 1:] - r[:, :1]) / h)
        return memo[k]

    def fun(x):
        return both(x)[0]

    def jac(x):
        return both(x)[1]

    sol = least_squares(fun, x0, jac=jac, bounds=(lo / ev.scale, hi / ev.scale), loss="soft_l1",
                        f_scale=F_SCALE, xtol=1e-3, ftol=1e-5, max_nfev=max_nfev)
    return sol.x * ev.scale, float(sol.cost), float(np.sqrt(np.mean(sol.fun ** 2)))


#: a parameter moves no row's prediction by more than this (|Δ ln|, over its whole bounded range):
#: the rows cannot tell its value, and it keeps its prior
IDENTIFIABLE_LOG = 0.02


def identifiable(rt_id: str, rows: list, names) -> tuple:
    """The parameters among ``names`` that the rows can tell: moving one from its lower to its upper
    bound (the others at their priors) changes some row's prediction by more than
    :data:`IDENTIFIABLE_LOG` in log. A parameter the rows cannot see (the compute efficiency of
    multi-token verification when a fold holds only batch-1 decode rows) keeps its prior instead of
    drifting to a bound, which would then decide the held-out predictions."""
    names = tuple(names)
    if not KEEP_UNSEEN_PRIORS:
        return names
    ev = _Evaluator(rt_id, rows, names)
    base = np.asarray([ev.base.__getattribute__(n) for n in names], float)
    out = []
    for j, n in enumerate(names):
        pts = np.repeat(base[None, :], 2, axis=0)
        pts[0, j], pts[1, j] = BOUNDS[n][0], BOUNDS[n][1]
        p = np.log(np.maximum(ev.preds(pts), 1e-30))
        if np.max(np.abs(p[:, 1] - p[:, 0])) > IDENTIFIABLE_LOG:
            out.append(n)
    return tuple(out)


def fit_all(ms: list[Measurement], grid_cache: dict | None = None, **kw) -> dict:
    """Fit every runtime that appears in ``ms`` (and keep the priors of the others)."""
    ids = sorted({m.runtime for m in ms} | set(FIT_PARAMS))
    return {r: fit_runtime(r, ms, grid_cache, **kw) for r in ids}


def runtimes_from_fit(fit: dict) -> dict:
    """{runtime id: Runtime with the fitted parameters} for :func:`costmodel.calibration.validate.validate`."""
    out = {}
    for r, f in fit.items():
        base = prior_runtime(r)
        out[r] = with_params(base, list(f["params"]), list(f["params"].values())) if f["params"] else base
    return out


def leave_one_source_out(ms: list[Measurement] | None = None, *, by: str = "publication", **kw) -> dict:
    """Held-out predictions: for each publication (or source group), refit the runtimes that have rows
    in it on the other rows and predict it. ``by``: 'publication' (``Measurement.publication``, the
    headline: a user's setup is a new publication) or 'group' (``source_group``, one table). Returns {"rows": [row results], "folds": [...], "full_fit": {...}}."""
    ms = load_measurements() if ms is None else list(ms)
    key = (lambda m: m.group) if by == "group" else (lambda m: m.publication or m.group)
    cache: dict = {}
    full = fit_all(ms, cache, **kw)
    results, folds = [], []
    for g in sorted({key(m) for m in ms}):
        held = [m for m in ms if key(m) == g]
        calib = [m for m in ms if key(m) != g]
        affected = sorted({m.runtime for m in fit_rows(held)})
        fold_fit = dict(full)
        for r in affected:
            fold_fit[r] = fit_runtime(r, calib, cache, **kw)
        rts = runtimes_from_fit(fold_fit)
        for m in held:
            res = row_result(m, predict(m, rts))
            res["fold"] = g
            results.append(res)
        folds.append({"held_out": g, "n_rows": len(held),
                      "refitted": {r: {"params": fold_fit[r]["params"], "n_rows": fold_fit[r]["n_rows"],
                                       "rows": fold_fit[r]["rows"]} for r in affected}})
    order = {m.id: i for i, m in enumerate(ms)}
    results.sort(key=lambda r: order[r["id"]])
    return {"rows": results, "folds": folds, "full_fit": full, "by": by}


# ------------------------------------------------------------------------------------------- ablation

def _no_bounds():
    """Efficiencies allowed above 1 (up to 1.15, the old fit range): what the physical bounds cost or buy."""
    return {"BOUNDS": dict(BOUNDS, bandwidth_efficiency=(0.3, 1.15, 1.0), compute_efficiency=(0.05, 1.1, 1.0))}


def _no_sm_cap():
    """llama.cpp without the per-SM bandwidth cap (Little's law): not fitted, no cap."""
    return {"FIT_PARAMS": dict(FIT_PARAMS, **{"llama.cpp": ("bandwidth_efficiency", "host_per_kernel_s")}),
            "PRIORS": dict(PRIORS, **{"llama.cpp": dict(PRIORS["llama.cpp"], sm_bandwidth_bytes_per_s=None)})}


def _no_spec_host():
    """No host work per speculation step (the runtimes' counted operations and syncs set to none)."""
    return {"SPEC_HOST_WORK": False}


def _no_unseen_priors():
    """Every parameter fitted in every fold, also those its rows cannot see (they drift to a bound)."""
    return {"KEEP_UNSEEN_PRIORS": False}


def _no_fp8_matrix_efficiency():
    """fp8 GEMMs priced at the fp16/bf16 GEMM fraction (``efficiency.matrix``) instead of their own
    measured one (``efficiency.matrix_fp8``)."""
    from costmodel.inputs.hardware import load_hardware

    def rewrite(rec):
        return {"hardware": dataclasses.replace(load_hardware(rec.hardware), matrix_efficiency_by_dtype=())}
    return {"records": rewrite}


def _no_mma_sync():
    """MoE experts of TensorRT-LLM up to 0.9 on Hopper at the dense (wgmma) rate: every device's
    ``mma_sync_matrix_fraction`` 1."""
    from costmodel.inputs.hardware import load_hardware

    def rewrite(rec):
        return {"hardware": dataclasses.replace(load_hardware(rec.hardware), mma_sync_matrix_fraction=1.0)}
    return {"records": rewrite}


def _no_fp16_attention():
    """fp8 engines' attention at the fp8 rate everywhere: every runtime's ``fp8_context_fmha`` true,
    the engine versions' too (the rows' versioned profiles given whole, with it switched on)."""
    from costmodel.inputs.runtime import load_runtime

    def rewrite(rec):
        rt = rec.runtime
        if isinstance(rt, str) and "@" in rt:
            return {"runtime": dataclasses.replace(load_runtime(rt), fp8_context_fmha=True)}
        return {}
    return {"FP16_ATTENTION": False, "records": rewrite}


def _no_per_rank_host():
    """vLLM's per-step host work flat (``step_overhead_s`` only): the per-rank term 0 and not fitted."""
    return {"FIT_PARAMS": dict(FIT_PARAMS, vllm=("bandwidth_efficiency", "step_overhead_s")),
            "PRIORS": dict(PRIORS, vllm=dict(PRIORS.get("vllm", {}), step_overhead_per_rank_s=0.0))}


def _no_custom_allreduce():
    """NCCL's all-reduce everywhere: the runtimes' ``tp_allreduce`` 'auto', rows pinned to 'custom' too."""
    return {"CUSTOM_ALLREDUCE": False,
            "records": lambda r: {"allreduce_algorithm": "auto"} if r.allreduce_algorithm == "custom" else {}}


#: name -> module-level overrides that switch one mechanism off; records may be rewritten by "records"
#: (field values for every record, or a function of the record)
ABLATIONS = {
    "fp8 GEMM efficiency measured per dtype (matrix_fp8)": _no_fp8_matrix_efficiency,
    "physical bounds (efficiencies ≤ 1)": _no_bounds,
    "per-SM bandwidth cap (llama.cpp)": _no_sm_cap,
    "host work per speculation step (counted ops and syncs)": _no_spec_host,
    "unseen parameters keep their priors": _no_unseen_priors,
    "all-reduce 'auto' (ring only)": lambda: {"records": {"allreduce_algorithm": "ring"}},
    # engine versions (trt-llm@0.5, @0.9) set their kernels' GQA mode (and XQA's group sizes) in the validation
    # rows, besides the MoE flags: off = the bare id, which also drops those flags
    "GQA-unaware attention kernels (eager repeat_kv; TensorRT-LLM before 0.7, and 0.7-0.9 outside XQA's 8 query heads per KV head; engine versions off, their MoE flags too)": lambda: {
        "GQA_KERNELS": False, "records": lambda r: {"runtime": split_version(r.runtime)[0]}},
    "per-sequence prefill (compiled)": lambda: {"PREFILL_PER_SEQUENCE": False},
    "Medusa heads from the checkpoint (5; off: one per tree level)": lambda: {
        "records": lambda r: {"medusa_heads": 4} if r.draft_model == "medusa" else {}},
    "custom all-reduce kernels (vLLM; off: NCCL)": _no_custom_allreduce,
    "host work per worker rank (vLLM; off: one flat step overhead)": _no_per_rank_host,
    "MoE GEMMs at the mma.sync rate on Hopper (TensorRT-LLM <= 0.9)": _no_mma_sync,
    "unfused tree attention in research code (eager)": lambda: {"UNFUSED_TREE_ATTENTION": False},
    "fp8 engines' attention in fp16 (TensorRT-LLM <= 0.9)": _no_fp16_attention,
}


def ablate(ms: list[Measurement], by: str = "publication", names=None) -> list:
    """[(mechanism, held-out summary with it switched off)]: the whole held-out procedure rerun per switch."""
    from costmodel.calibration.validate import summarize
    g = globals()
    out = []
    for name in names or ABLATIONS:
        patch = ABLATIONS[name]()
        saved = {k: g[k] for k in patch if k != "records"}
        rows = ms
        if "records" in patch:
            change = patch["records"]
            rows = [dataclasses.replace(m, record=m.record.replace(**(change(m.record) if callable(change) else change)))
                    for m in ms]
        try:
            g.update({k: v for k, v in patch.items() if k != "records"})
            out.append((name, summarize(leave_one_source_out(rows, by=by)["rows"])))
        finally:
            g.update(saved)
    return out
