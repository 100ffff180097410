"""Hardware-blind recommendation: the same comparison of strategy families over many devices.

The devices are the zoo's, a given list, or ``samples`` synthetic devices drawn from an envelope
of ranges (bandwidth, FLOP/s, L2, capacity; a Latin hypercube in log space, scipy.stats.qmc).
Over the N devices where at least one strategy fits, per strategy s:

    win_probability[s]   = (1/N) Σ_devices [s is the best that fits]        (ties shared; Σ_s = 1)
    worst_case_ratio[s]  = min over the devices where s fits of  objective(s) / objective(best)
    fit_probability[s]   = share of the N devices where s fits

The recommendation is the strategy with the highest worst-case ratio among those that fit on at
least ``FIT_SHARE`` of the devices the most widely fitting strategy fits on; ties go to the higher
win probability.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel.errors import InputError, shown
from costmodel.inputs.hardware import Hardware, load_hardware
from costmodel.analysis.recommend_reasons import fmt_ratio
from costmodel.analysis.recommend_variants import OBJECTIVES, evaluate_families, variants

#: envelope keys -> the Hardware field they set (SI units)
ENVELOPE_KEYS = {"bandwidth_bytes_per_s": "bandwidth", "matrix_flops_per_s": "flops", "l2_bytes": "l2",
                 "capacity_bytes": "capacity"}
ENVELOPE_BASE = "a100-80gb"
#: hardware-blind: a strategy is eligible when it fits on at least this share of the devices the
#: most widely fitting strategy fits on
FIT_SHARE = 0.75


def zoo_hardware() -> list:
    """The zoo's device ids."""
    from costmodel.inputs.specs import zoo_ids
    return list(zoo_ids("hardware_specs"))


class SampledHardware(Hardware):
    """A device drawn from an envelope: a Hardware compared and hashed by identity (its peaks are a
    dict, so the dataclass hash cannot be used by caches keyed on the record)."""

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other


#: most devices drawn from an envelope (each is a full evaluation of every strategy: ~10 ms)
MAX_SAMPLES = 1024


def _envelope_range(name: str, key: str, v) -> tuple:
    """(low, high) of one envelope key: two finite numbers within the hardware spec's physical range."""
    from costmodel.inputs import hardware as H
    limits = {"bandwidth_bytes_per_s": H.BANDWIDTH, "matrix_flops_per_s": H.RATE, "capacity_bytes": H.BYTES,
              "l2_bytes": {"min_value": 1.0, "max_value": 1e10}}[key]
    lo_ok, hi_ok = limits["min_value"], limits["max_value"]
    allowed = f"{lo_ok:g} <= low <= high <= {hi_ok:g} (SI units)"
    if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__len__") or len(v) != 2:
        raise InputError(f"expected (low, high), got {shown(v)}", field=name, allowed=allowed)
    vals = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise InputError(f"expected numbers, got {shown(x)}", field=name, allowed=allowed)
        try:
            vals.append(float(x))
        except OverflowError:
            vals.append(math.inf)
    lo, hi = vals
    if not (lo_ok <= lo <= hi <= hi_ok):       # also refuses nan and inf
        raise InputError(f"bad range {lo:g}..{hi:g}", field=name, allowed=allowed)
    return lo, hi


def check_samples(samples, seed) -> None:
    """Refuse a ``samples`` outside 1..``MAX_SAMPLES`` or a negative ``seed`` (InputError naming it)."""
    for name, v, lo, hi in (("samples", samples, 1, MAX_SAMPLES), ("seed", seed, 0, 2 ** 63 - 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise InputError(f"out of range: {shown(v)}", field=name, allowed=f"an integer {lo}..{hi}")


def sample_envelope(envelope: dict | None, samples: int = 64, seed: int = 0, base: str = ENVELOPE_BASE) -> list:
    """``samples`` synthetic devices with bandwidth, matrix FLOP/s (fp16), L2 and capacity drawn
    log-uniformly (Latin hypercube, scipy.stats.qmc) from ``envelope`` {key: (lo, hi)}; keys missing
    from the envelope span the zoo's range. Everything else (efficiencies, launch costs, links) is
    the ``base`` device's; the other dtypes' peaks scale with fp16."""
    from scipy.stats import qmc
    env = {}
    for k, v in (envelope or {}).items():
        key = {alias: full for full, alias in ENVELOPE_KEYS.items()}.get(k, k)
        if key not in ENVELOPE_KEYS:
            raise InputError(f"unknown envelope key {shown(k)}", field="envelope",
                             allowed=", ".join(list(ENVELOPE_KEYS) + list(ENVELOPE_KEYS.values())))
        lo, hi = _envelope_range(k, key, v)
        env[key] = (lo, hi)
    zoo = [load_hardware(i) for i in zoo_hardware()]
    zoo_range = {"bandwidth_bytes_per_s": [h.bandwidth_bytes_per_s for h in zoo],
                 "matrix_flops_per_s": [h.matrix_peak("fp16") for h in zoo],
                 "l2_bytes": [h.l2_bytes for h in zoo], "capacity_bytes": [h.capacity_bytes for h in zoo]}
    for k, vals in zoo_range.items():
        env.setdefault(k, (min(vals), max(vals)))
    keys = list(ENVELOPE_KEYS)
    u = qmc.LatinHypercube(d=len(keys), seed=np.random.default_rng(seed)).random(samples)
    lo = np.log([env[k][0] for k in keys])
    hi = np.log([env[k][1] for k in keys])
    vals = np.exp(lo + u * (hi - lo))
    b0 = load_hardware(base)
    b = SampledHardware(**{f.name: getattr(b0, f.name) for f in dataclasses.fields(b0)})
    f16 = b.matrix_peak("fp16")
    out = []
    for i, row in enumerate(vals):
        bw, fl, l2, cap = (float(x) for x in row)
        s = fl / f16
        out.append(dataclasses.replace(
            b, id=f"envelope-{i}", name=f"envelope sample {i}", bandwidth_bytes_per_s=bw,
            matrix_flops_per_s={k: (v * s if v else v) for k, v in b.matrix_flops_per_s.items()},
            vector_flops_per_s=b.vector_flops_per_s * s, l2_bytes=l2,
            capacity_bytes=cap, usable_bytes=cap * b.usable_bytes / b.capacity_bytes,
            sources=(), source_file="envelope"))
    return out


def recommend_blind(fields: dict, hardware: list, objective: str = "tokens_per_s") -> dict:
    """Win probability, fit probability and worst-case ratio to the best per strategy over ``hardware``
    (devices where nothing fits are left out; see the module docstring)."""
    fam, notes = variants(fields)
    names = list(fam)
    per_hw, skipped, wins = _per_device(fields, hardware, fam, objective)
    n = len(per_hw)
    if n == 0:
        return {"recommended": None, "reason": "nothing fits on any of the devices evaluated",
                "win_probability": {k: 0.0 for k in names}, "worst_case_ratio": {k: 0.0 for k in names},
                "fit_probability": {k: 0.0 for k in names}, "candidates": [], "hardware_evaluated": 0,
                "hardware_skipped": skipped, "notes": notes, "objective": objective}
    prob = {k: wins[k] / n for k in names}
    fitp = {k: sum(p["fits"][k] for p in per_hw) / n for k in names}
    worst, worst_hw, nofit = _worst_cases(per_hw, names)
    mean_ratio = {k: float(np.mean([p["ratios"][k] for p in per_hw])) for k in names}
    eligible = [k for k in names if fitp[k] >= FIT_SHARE * max(fitp.values())] or names
    rec = max(eligible, key=lambda k: (worst[k], prob[k]))
    reason = _blind_reason(rec, names, per_hw, skipped, prob, worst, worst_hw, nofit)
    cands = [{"strategy": k, "win_probability": prob[k], "worst_case_ratio": worst[k],
              "worst_case_hardware": worst_hw[k], "mean_ratio_to_best": mean_ratio[k], "fit_probability": fitp[k],
              "does_not_fit_on": nofit[k]}
             for k in sorted(names, key=lambda k: (k != rec, -worst[k], -prob[k]))]
    return {"recommended": rec, "reason": reason, "objective": objective, "win_probability": prob,
            "worst_case_ratio": worst, "fit_probability": fitp, "candidates": cands, "hardware_evaluated": n,
            "hardware_skipped": skipped, "per_hardware": per_hw, "notes": notes}


def _per_device(fields: dict, hardware: list, fam: dict, objective: str) -> tuple[list, list, dict]:
    """Evaluate every family on every device: (per-device rows, devices where nothing fits, wins per
    family with ties shared)."""
    names = list(fam)
    wins = {k: 0.0 for k in names}
    per_hw, skipped = [], []
    for hw in hardware:
        hw_id = hw.id if isinstance(hw, Hardware) else str(hw)
        ev = evaluate_families(fields, hw, objective=objective, fam=fam)
        g = {k: float(np.ravel(ev[k]["goodness"])[0]) for k in names}
        top = max(g.values())
        if not math.isfinite(top) or top <= 0:
            skipped.append(hw_id)
            continue
        ratios = {k: (g[k] / top if math.isfinite(g[k]) else 0.0) for k in names}
        winners = [k for k in names if ratios[k] >= 1.0 - 1e-9]
        for k in winners:
            wins[k] += 1.0 / len(winners)
        best_cfg = {k: ev[k]["configs"][int(np.ravel(ev[k]["index"])[0])] for k in names}
        ar_bound = str(np.ravel(ev["autoregressive"]["results"][0]["bound"])[0])
        per_hw.append({"hardware": hw_id, "best": winners[0], "ratios": ratios,
                       "fits": {k: math.isfinite(g[k]) for k in names}, "configs": best_cfg,
                       "objective_best": top if OBJECTIVES[objective] > 0 else 1.0 / top,
                       "ar_bound": ar_bound})
    return per_hw, skipped, wins


def _worst_cases(per_hw: list, names: list) -> tuple[dict, dict, dict]:
    """Per family: the lowest ratio to the best over the devices where it fits, that device, and the
    devices where it does not fit."""
    worst, worst_hw, nofit = {}, {}, {}
    for k in names:
        runs = [p for p in per_hw if p["fits"][k]]
        nofit[k] = [p["hardware"] for p in per_hw if not p["fits"][k]]
        if runs:
            w = min(runs, key=lambda p: p["ratios"][k])
            worst[k], worst_hw[k] = w["ratios"][k], w["hardware"]
        else:
            worst[k], worst_hw[k] = 0.0, None
    return worst, worst_hw, nofit


def _blind_reason(rec: str, names: list, per_hw: list, skipped: list, prob: dict, worst: dict, worst_hw: dict,
                  nofit: dict) -> str:
    """The hardware-blind reason: the recommendation's worst case, the regime of plain decoding, the
    runner-up, the most frequent winner when it differs, and where each strategy does not fit."""
    n = len(per_hw)
    likely = max(names, key=lambda k: prob[k])
    bounds = {}
    for p in per_hw:
        bounds[p["ar_bound"]] = bounds.get(p["ar_bound"], 0) + 1
    regime = ", ".join(f"{b}-bound on {k}" for b, k in sorted(bounds.items(), key=lambda x: -x[1]))
    if worst[rec] >= 1.0 - 1e-9:
        reason = f"{rec} is the best on all {n - len(nofit[rec])} devices where it fits"
    else:
        reason = (f"over {n} devices, {rec} is never worse than {fmt_ratio(worst[rec])}× the best "
                  f"(worst on {worst_hw[rec]}) and wins on {prob[rec]:.0%} of them")
    reason += f" (autoregressive decoding is {regime})"
    others = sorted((k for k in names if k != rec), key=lambda k: (-worst[k], -prob[k]))
    if others:
        o = others[0]
        reason += f"; the runner-up {o} falls to {worst[o]:.2f}× the best on {worst_hw[o]}"
    if likely != rec:
        reason += (f"; {likely} wins more often ({prob[likely]:.0%}) but falls to {worst[likely]:.2f}× the best "
                   f"on {worst_hw[likely]}")
    tight = [k for k in names if nofit[k]]
    for k in tight:
        reason += f"; {k} does not fit on {', '.join(nofit[k])}"
    if skipped:
        reason += f"; left out (nothing fits): {', '.join(skipped)}"
    return reason
