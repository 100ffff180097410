"""Claim checking: ``check(claims)`` -> a verdict per claim (verdicts: docs/design.md, "Command line"; user guide: docs/decisions.md).

A claim is a record plus ``id``, ``text`` and either ``metric`` + ``value`` or ``values`` (a mapping
metric -> value, or a list of ``{metric, value, text}``). Values: a number, a ``[low, high]`` range,
an inequality string (``"< 1"``, ``">= 2.5"``), ``true``/``false`` (``fits``) or a name (``bound``,
``recommended_strategy``). Optional: ``relative_to`` (record overrides: the figure is the metric's
ratio to — or with ``compare: difference`` its difference from — the same metric of the overridden
record), ``not_checkable`` (why the model cannot express the claim), ``notes``.

Metrics: any key ``evaluate(record, details=True)`` returns, plus ``hardware.<field>`` (a spec
figure), ``attention_time_s`` (attention operators of one step), ``attention_time_fraction``
(attention ÷ (attention + FFN) operator time), ``breakeven_acceptance_rate`` (the α at which the
speedup over AR reaches 1), ``recommended_strategy`` (:func:`costmodel.analysis.recommend.recommend`; hardware-
blind without ``hardware``), and two metrics joined by ``+``, ``-`` or ``/``.

Verdict of one figure, from most to least severe:

* ``impossible``   — breaks a hard bound (below):
    - does not fit: weights on the device + the prompt's KV cache > usable memory;
    - beats the HBM floor  T_step ≥ T_floor = max((W_read + KV_read) / BW_peak, 2·N_active·S / (tp·F_peak)),
      W_read = active weights per device, KV_read = S·P·KV bytes/token (S sequences, P prompt tokens),
      BW_peak and F_peak datasheet peaks (not the achievable ones) → step_latency ≥ T_floor,
      tokens/s per sequence ≤ τ_b / T_floor, time per output token ≥ T_floor / τ_b, aggregate
      tokens/s ≤ S·τ_b / T_floor, TTFT ≥ prefill floor, e2e ≥ (G−1)/τ_b·T_floor;
    - beats the compute ceiling: aggregate tokens/s ≤ n_devices·F_peak / (2·N_active) (every output
      token costs at least one target forward pass);
    - a speedup over AR above τ_b (a verification step never costs less than an AR step);
    - τ above γ+1 for a chain (depth+1 for a tree);
    - peak memory below the weights + prompt KV that must be resident.
  τ_b is the tokens per step the claim's own acceptance gives (1 for AR and shared-prefix).
* ``inconsistent`` — the claim's figures contradict each other (tolerance ``IDENTITY_TOLERANCE``):
  step latency × tokens/s per sequence = tokens per step (the claimed τ or the one its acceptance
  gives, and never below 1); TPOT × tokens/s per sequence = 1; tokens/s = sequences × tokens/s per
  sequence; draft time + verify time = step latency; speedup ≤ tokens per step; peak memory ≥ the
  claimed parts; α and τ that disagree; one metric given two values; a stated ``bound`` other than the
  binding resource of the claim's configuration.
* ``optimistic`` / ``pessimistic`` — better / worse than predicted by more than the error band
  (|claimed − predicted| / |claimed| > band; "better" = higher throughput, speedup or tokens per step,
  lower latency, memory, bytes or FLOPs). A ratio of two records' throughput or latency
  (``relative_to``) and a ``recommended_strategy`` claim use the band of ``speedup_vs_ar``.
* ``consistent``   — within the band. The band is the p90 absolute relative error of validation for
  that metric when it has ≥ 5 rows, else the overall p90 (``validation/error_band.yaml``).

A claim takes its most severe figure's verdict (impossible > inconsistent > optimistic/pessimistic >
consistent); ``not_checkable`` claims carry their note as the reason.
"""

from __future__ import annotations

import math
import os

import numpy as np

from costmodel.analysis.claims_load import Claimed, ErrorBand, claim_figures, load_claims, load_error_band, parse_value
from costmodel.analysis.claim_needs import add_needed_alpha
from costmodel.analysis.claims_model import Limits, Predictor, band_verdict, bound_violations, clear_cache, \
    fmt_figure, hard_limits, parse_claim_record, recommend_cached, record_fields
from costmodel.errors import InputError
from costmodel.inputs import rules
from costmodel.inputs.fields import STRATEGIES

__all__ = ["check", "check_claim", "load_claims", "load_error_band", "SEVERITY", "VERDICTS"]

SEVERITY = {"not_checkable": 0, "consistent": 1, "optimistic": 2, "pessimistic": 2, "inconsistent": 3,
            "impossible": 4}
VERDICTS = tuple(SEVERITY)
#: tolerance of the arithmetic identities between a claim's own figures (rounded, "about" figures)
IDENTITY_TOLERANCE = 0.15
CATEGORICAL = {"bound", "recommended_strategy"}
#: throughput and latency metrics: their ratio between two records is judged with the speedup band
RATE_METRICS = {"tokens_per_s", "tokens_per_s_per_seq", "step_latency_s", "time_per_output_token_s",
                "e2e_latency_s", "ttft_s"}


# --------------------------------------------------------------------------- one claim
def _identity_checks(figs: dict, pred: Predictor, lim: Limits, stated_tau_given: bool) -> list:
    """(verdict, metric, reason) for arithmetic contradictions between a claim's own point figures."""
    tol = IDENTITY_TOLERANCE
    out = []

    def pt(k):
        c = figs.get(k)
        return c.lo if c is not None and c.kind == "point" else (0.5 * (c.lo + c.hi) if c is not None and
                                                                 c.kind == "range" else None)

    def off(a, b):
        return abs(a - b) / max(abs(b), 1e-300) > tol

    lat, tps, tpot, agg, tpst = (pt(k) for k in ("step_latency_s", "tokens_per_s_per_seq", "time_per_output_token_s",
                                                  "tokens_per_s", "tokens_per_step"))
    implied = None
    how = ""
    if lat is not None and tps is not None:
        implied, how = lat * tps, f"{fmt_figure(lat, 's')} per step × {tps:g} tokens/s per sequence"
    elif lat is not None and tpot is not None:
        implied, how = lat / tpot, f"{fmt_figure(lat, 's')} per step ÷ {fmt_figure(tpot, 's')} per token"
    if implied is not None:
        if tpst is not None:
            stated, what = tpst, "the claimed tokens per step"
        else:
            stated = lim.tau_b
            what = ("the τ its acceptance gives" if pred.rec.strategy in ("speculative", "tree")
                    else "the one token per step of this strategy")
        if implied < 1.0 - tol:
            out.append(("inconsistent", "tokens_per_step",
                        f"{how} imply {implied:.2f} tokens per step, fewer than the one every step yields"
                        + (f" (its acceptance gives τ = {stated:.2f})" if pred.rec.strategy in ("speculative", "tree")
                           else "")))
        elif off(implied, stated):
            out.append(("inconsistent", "tokens_per_step",
                        f"{how} imply {implied:.2f} tokens per step, but {what} is {stated:.2f}"))
    if tpot is not None and tps is not None and off(tpot * tps, 1.0):
        out.append(("inconsistent", "time_per_output_token_s",
                    f"{fmt_figure(tpot, 's')} per token and {tps:g} tokens/s per sequence disagree (product {tpot * tps:.2f}, not 1)"))
    if agg is not None and tps is not None and off(agg / tps, lim.seqs):
        out.append(("inconsistent", "tokens_per_s",
                    f"{agg:g} tokens/s in aggregate is {agg / tps:.2f}× the {tps:g} per sequence, but "
                    f"{lim.seqs:.0f} sequences decode"))
    d, v = pt("draft_time_per_step_s"), pt("verify_time_s")
    if d is not None and v is not None and lat is not None and off(d + v, lat):
        out.append(("inconsistent", "step_latency_s",
                    f"draft {fmt_figure(d, 's')} + verify {fmt_figure(v, 's')} = {fmt_figure(d + v, 's')}, not the claimed {fmt_figure(lat, 's')} per step"))
    sp = pt("speedup_vs_ar")
    if sp is not None and tpst is not None and sp > tpst * (1 + tol):
        out.append(("inconsistent", "speedup_vs_ar",
                    f"a {sp:g}× speedup needs more than the claimed {tpst:g} tokens per step"))
    peak = pt("peak_device_memory_bytes")
    parts = [pt(k) for k in figs if k.startswith("memory_") or k in ("kv_cache_bytes", "weights_bytes")]
    parts = [x for x in parts if x is not None]
    if peak is not None and parts and sum(parts) > peak * (1 + tol):
        out.append(("inconsistent", "peak_device_memory_bytes",
                    f"the claimed parts add up to {fmt_figure(sum(parts), 'B')}, more than the claimed peak {fmt_figure(peak, 'B')}"))
    return out


def check_claim(c: dict, band: ErrorBand) -> dict:
    """Verdict of one claim (mapping); see the module docstring. In steps: the figures parsed and the
    verdicts found before evaluation (a metric given twice, impossible or inconsistent acceptance),
    each figure judged against the model (or the hardware-blind recommendation), then the claim's
    verdict, the most severe of its figures'."""
    cid = str(c.get("id", "?"))
    src = c.get("_source", f"claim {cid}")
    base = {"id": cid, "verdict": "not_checkable", "reason": "", "claimed": None, "predicted": None}
    if c.get("text"):
        base["text"] = str(c["text"]).strip()
    if "not_checkable" in c:
        base["reason"] = str(c["not_checkable"]).strip()
        if "metric" in c:
            base["claimed"] = c.get("value")
        return base
    figs_raw = claim_figures(c, src)
    fields = record_fields(c)
    pre = []                 # figure-level verdicts found before evaluation
    figs = _parse_figures(figs_raw, src, pre)
    tau = _acceptance_checks(fields, pre)
    note_fit = None
    blind = "hardware" not in fields and all(m == "recommended_strategy" for m, _, _ in figs)
    if blind:
        r = recommend_cached(fields)
        results = [_judge_recommendation(cv, r, band, text) for metric, cv, text in figs]
    else:
        results, note_fit = _judge_figures(c, fields, figs, src, band, tau is not None)
    for v, metric, why in pre:
        results.insert(0, {"metric": metric, "claimed": c.get(metric), "predicted": None, "verdict": v, "reason": why})
    _set_verdict(base, c, figs, results, note_fit)
    return base


def _parse_figures(figs_raw: list, src: str, pre: list) -> list:
    """[(metric, ClaimValue, text)] from the claim's raw figures; a metric given twice with different
    values adds an ``inconsistent`` verdict to ``pre``."""
    figs = []
    seen = {}
    for metric, value, text in figs_raw:
        cv = parse_value(value, src, metric)
        if metric in seen and seen[metric].raw != cv.raw:
            pre.append(("inconsistent", metric, f"{metric} is given as both {seen[metric].raw!r} and {cv.raw!r}"))
        seen[metric] = cv
        figs.append((metric, cv, text))
    return figs


def _acceptance_checks(fields: dict, pre: list):
    """The acceptance figures in the claim's record itself: τ above what the chain (γ + 1) or the tree
    (depth + 1) can accept is ``impossible`` (τ is capped there), τ disagreeing with the stated α is
    ``inconsistent`` (τ is dropped, α kept); the verdicts go to ``pre``. Returns the stated τ."""
    strat = str(fields.get("strategy", "autoregressive")).strip().lower()
    tau, alpha = fields.get("mean_accepted_tokens"), fields.get("acceptance_rate")
    if strat in ("speculative", "spec") and tau is not None:
        g = float(fields.get("gamma", 4))
        if rules.tau_exceeds_chain(float(tau), g):
            pre.append(("impossible", "mean_accepted_tokens",
                        f"τ = {float(tau):g} tokens per step from a chain of γ = {g:g} drafts exceeds γ + 1 = {g + 1:g}"))
            fields["mean_accepted_tokens"] = g + 1.0
        elif alpha is not None:
            from costmodel.engine.acceptance import chain_tokens_per_step
            implied = float(chain_tokens_per_step(float(alpha), g))
            if rules.taus_disagree(implied, float(tau)):
                pre.append(("inconsistent", "mean_accepted_tokens",
                            f"α = {float(alpha):g} at γ = {g:g} gives τ = {implied:.2f}, but the claim states τ = {float(tau):g}"))
                fields.pop("mean_accepted_tokens")
    if strat == "tree" and tau is not None and fields.get("tree_depth") is not None and \
            float(tau) > float(fields["tree_depth"]) + 1:
        pre.append(("impossible", "mean_accepted_tokens",
                    f"τ = {float(tau):g} exceeds tree depth + 1 = {float(fields['tree_depth']) + 1:g}"))
        fields["mean_accepted_tokens"] = float(fields["tree_depth"]) + 1.0
    return tau


def _judge_figures(c: dict, fields: dict, figs: list, src: str, band: ErrorBand, tau_given: bool) -> tuple:
    """Each figure of a claim with hardware judged against the model's prediction, plus the identity
    checks of an absolute claim. Returns (figure results, a note when the record does not fit)."""
    rec = parse_claim_record(fields, src)
    pred = Predictor(fields, rec, band)
    lim = hard_limits(rec, pred.out)
    note_fit = None
    if not pred.out["fits"] and lim.fits_floor and not any(m == "fits" for m, _, _ in figs):
        note_fit = (f"note: the model's predicted peak of {fmt_figure(pred.out['peak_device_memory_bytes'], 'B')} "
                    f"exceeds the {fmt_figure(pred.out['usable_memory_bytes'], 'B')} usable")
    rel = c.get("relative_to")
    compare = str(c.get("compare", "ratio"))
    if compare not in ("ratio", "difference"):
        raise InputError(f"unknown compare {compare!r}", source=src, field="compare", allowed="ratio, difference")
    results = []
    lim_other = None
    for metric, cv, text in figs:
        b, basis = band.for_metric(metric, rec.batch_size)
        if rel and compare == "ratio" and metric in RATE_METRICS:
            b, basis = band.for_metric("speedup_vs_ar")       # a ratio of two rates is a speedup
            basis += " (a ratio of two rates)"
        if rel:
            if not isinstance(rel, dict):
                raise InputError("must be a mapping of record overrides", source=src, field="relative_to")
            p, other = pred.value(metric, rel, compare)
            lim_other = lim_other or hard_limits(other.rec, other.out)
        else:
            p = pred.value(metric)
        fig = {"metric": metric, "claimed": cv.raw, "predicted": _num(p), "band": b}
        if text:
            fig["text"] = text
        if not _judge_fit(fig, metric, cv, lim, lim_other, rel):
            _judge_value(fig, metric, cv, p, b, basis, lim, rel, compare, pred, band, rec)
            if fig["verdict"] in ("optimistic", "pessimistic", "impossible"):
                add_needed_alpha(fig, fields, rec, src, band, metric, cv, p, rel, compare)
        results.append(fig)
    if not rel:
        for v, metric, why in _identity_checks({m: cv for m, cv, _ in figs}, pred, lim, tau_given):
            results.append({"metric": metric, "claimed": None, "predicted": None, "verdict": v, "reason": why})
    return results, note_fit


def _judge_fit(fig: dict, metric: str, cv, lim, lim_other, rel) -> bool:
    """Mark ``fig`` impossible when the record (or the one it is compared with) cannot fit even its
    weights and prompt KV, naming the bounds the figure would break even if it did; True when so
    (unless the figure itself claims that it does not fit)."""
    not_fit = (not lim.fits_floor) or (lim_other is not None and not lim_other.fits_floor)
    if not not_fit or (metric == "fits" and cv.name == "false"):
        return False
    which = lim if not lim.fits_floor else lim_other
    broken = [f"does not fit: at least {fmt_figure(which.mem_floor, 'B')} of weights and prompt KV "
              f"must be resident on a device with {fmt_figure(which.usable, 'B')} usable"]
    broken += [f"even if it did, {t}" for t in bound_violations(metric, cv, lim, relative=bool(rel))]
    fig.update(verdict="impossible", reason="; ".join(broken), bounds_broken=broken)
    return True


def _judge_value(fig: dict, metric: str, cv, p, b, basis: str, lim, rel, compare: str, pred, band, rec) -> None:
    """The verdict of one figure of a record that fits: impossible when it breaks a hard bound, else by
    category or against the error band."""
    broken = bound_violations(metric, cv, lim, relative=bool(rel))
    if not broken and rel and metric in ("tokens_per_s", "tokens_per_s_per_seq") and \
            rel.get("strategy") == "autoregressive" and compare == "ratio":
        broken = bound_violations("speedup_vs_ar", cv, lim)
    if broken:
        fig.update(verdict="impossible", reason="; ".join(broken), bounds_broken=broken)
    elif metric in CATEGORICAL or cv.kind in ("name", "bool"):
        fig.update(_judge_category(metric, cv, p, pred, band, rec))
    else:
        v, why = band_verdict(metric, cv, p, b, basis, relative=bool(rel) and compare == "ratio")
        fig.update(verdict=v, reason=why)


def _set_verdict(base: dict, c: dict, figs: list, results: list, note_fit) -> None:
    """The claim's verdict and reason from its figures' (the most severe, then the largest deviation),
    with what was claimed and predicted, into ``base``."""
    top = max(results, key=lambda r: (SEVERITY[r["verdict"]], _deviation(r)))
    worst = [r for r in results if SEVERITY[r["verdict"]] == SEVERITY[top["verdict"]]]
    reason = top["reason"]
    if top["verdict"] == "impossible":
        base["bounds_broken"] = _every_bound(worst, named=len(results) > 1)
        reason = "; ".join(base["bounds_broken"] + list(dict.fromkeys(
            (f"{r['metric']}: " if len(results) > 1 else "") + r["acceptance_note"]
            for r in worst if r.get("acceptance_note"))))
    elif len(results) > 1:
        reason = f"{top['metric']}: {reason}"
        if len(worst) > 1:
            reason += f" (and {len(worst) - 1} more {top['verdict']} figure{'s' if len(worst) > 2 else ''})"
    names = {m for m, _, _ in figs}
    real = [r for r in results if r["metric"] in names and "band" in r]
    if len(figs) == 1:
        claimed, predicted = figs[0][1].raw, real[0]["predicted"] if real else None
        base["metric"] = figs[0][0]
    elif len({m for m, _, _ in figs}) < len(figs):          # one metric given several times
        claimed = [{m: cv.raw} for m, cv, _ in figs]
        predicted = {r["metric"]: r["predicted"] for r in real}
    else:
        claimed = {m: cv.raw for m, cv, _ in figs}
        predicted = {r["metric"]: r["predicted"] for r in real}
    if note_fit and top["verdict"] != "impossible":
        reason += f" [{note_fit}]"
    base.update(verdict=top["verdict"], reason=reason, claimed=claimed, predicted=predicted, figures=results)
    if c.get("relative_to"):
        base["relative_to"] = c["relative_to"]
        base["compare"] = c.get("compare", "ratio")


def _every_bound(figures: list, named: bool) -> list:
    """Every hard bound the impossible figures break, each once ('does not fit' first), metric-named."""
    out = []
    for r in figures:
        for t in r.get("bounds_broken", [r["reason"]]):
            if named and not t.startswith("does not fit"):
                lead = "even if it did, " if t.startswith("even if it did, ") else ""
                t = f"{lead}{r['metric']}: {t[len(lead):]}"
            if t not in out:
                out.append(t)
    return sorted(out, key=lambda t: not t.startswith("does not fit"))


def _deviation(r: dict) -> float:
    """|predicted − claimed| / |claimed| of a point figure (to pick the figure a reason quotes)."""
    c, p = r.get("claimed"), r.get("predicted")
    if isinstance(c, (int, float)) and not isinstance(c, bool) and isinstance(p, (int, float)) and c:
        return abs(p - c) / abs(c)
    return 0.0


def _num(p):
    if isinstance(p, (bool, np.bool_)):
        return bool(p)
    if isinstance(p, str):
        return p
    try:
        f = float(p)
    except (TypeError, ValueError):
        return p
    return f if math.isfinite(f) else None


def _judge_category(metric: str, cv: Claimed, p, pred: Predictor, band: ErrorBand, rec) -> dict:
    if metric == "fits" or cv.kind == "bool":
        pv = bool(p)
        if (cv.name == "true") == pv:
            return {"verdict": "consistent", "reason": f"claims fits = {cv.name}; the model agrees "
                    f"(peak {fmt_figure(pred.out['peak_device_memory_bytes'], 'B')} of {fmt_figure(pred.out['usable_memory_bytes'], 'B')})"}
        peak, use = pred.out["peak_device_memory_bytes"], pred.out["usable_memory_bytes"]
        if cv.name == "true":
            return {"verdict": "optimistic", "reason": f"claims it fits; the model predicts a peak of {fmt_figure(peak, 'B')} "
                    f"over the {fmt_figure(use, 'B')} usable (the weights + prompt KV floor itself fits)"}
        return {"verdict": "pessimistic", "reason": f"claims it does not fit; the model predicts a peak of "
                f"{fmt_figure(peak, 'B')} within the {fmt_figure(use, 'B')} usable"}
    if metric == "bound":
        if cv.name == str(p):
            return {"verdict": "consistent", "reason": f"claims {cv.name}-bound; the model agrees"}
        return {"verdict": "inconsistent", "reason": f"claims {cv.name}-bound, but this configuration's own bytes "
                f"and FLOPs make it {p}-bound (arithmetic intensity {pred.out['arithmetic_intensity']:.3g} FLOP/B)"}
    if metric == "recommended_strategy":
        return _judge_recommendation(cv, recommend_cached(pred.fields), band, None, fig_only=True)
    raise InputError(f"metric {metric!r} is not categorical", field="metric")


def _judge_recommendation(cv: Claimed, r: dict, band: ErrorBand, text, fig_only=False) -> dict:
    want = {"ar": "autoregressive", "spec": "speculative", "shared": "shared_prefix"}.get(cv.name, cv.name)
    if want not in STRATEGIES:
        raise InputError(f"unknown strategy {cv.raw!r}", field="recommended_strategy", allowed=", ".join(STRATEGIES))
    b, basis = band.for_metric("speedup_vs_ar")       # a ratio of two strategies' throughput
    best = r.get("recommended")
    fig = {} if fig_only else {"metric": "recommended_strategy", "claimed": cv.raw, "predicted": best, "band": b}
    if text and not fig_only:
        fig["text"] = text
    if "win_probability" in r:
        wp, wc = r["win_probability"].get(want, 0.0), r["worst_case_ratio"].get(want, 0.0)
        bw = r["worst_case_ratio"].get(best, 0.0) if best else 0.0
        if want == best:
            fig.update(verdict="consistent", reason=f"the model also recommends {want} ({r['reason']})")
        elif bw > 0 and wc >= bw * (1 - b):
            fig.update(verdict="consistent", reason=f"the model prefers {best} ({want} wins on {wp:.0%} of the devices), "
                       f"but the gap is within the ±{b:.0%} band: {want} is never worse than {wc:.2f}× the best "
                       f"({r['reason']})")
        else:
            fig.update(verdict="optimistic", reason=f"{want} wins on {wp:.0%} of the devices and falls to {wc:.2f}× "
                       f"the best; the model recommends {best} ({r['reason']})")
        return fig
    ratio = next((c["ratio_to_best"] for c in r["candidates"] if c["strategy"] == want), 0.0)
    if want == best:
        fig.update(verdict="consistent", reason=f"the model also recommends {best}: {r['reason']}")
    elif ratio >= 1 - b:
        fig.update(verdict="consistent", reason=f"the model prefers {best}, but {want} is within the ±{b:.0%} band "
                   f"of it ({ratio:.2f}×): {r['reason']}")
    else:
        fig.update(verdict="optimistic", reason=f"the model recommends {best}; {want} reaches only {ratio:.2f}× the "
                   f"best: {r['reason']}")
    return fig


# --------------------------------------------------------------------------- entry point
def check(claims, *, band=None) -> dict:
    """Check claims (a path to a claims YAML, a mapping with ``claims:``, or a list of claim mappings)
    against the model and its validation error band (``band``: path, mapping or None for the project's
    ``validation/error_band.yaml``). Returns ``{"claims": [{"id", "verdict", "reason", "claimed",
    "predicted", ...}], "summary": {verdict: count}, "band": {...}}``; see the module docstring."""
    b = load_error_band(band)
    if isinstance(claims, (str, os.PathLike)):
        items = load_claims(claims)
    elif isinstance(claims, dict) and "claims" in claims:
        if not isinstance(claims["claims"], (list, tuple)):
            raise InputError(f"must be a list of claims, got {type(claims['claims']).__name__}", field="claims")
        items = list(claims["claims"])
    elif isinstance(claims, (list, tuple)):
        items = list(claims)
    else:
        raise InputError(f"claims must be a path, a mapping with 'claims:', or a list of claims, got "
                         f"{type(claims).__name__}", field="claims")
    out = []
    ids = set()
    clear_cache()
    for i, c in enumerate(items):
        if not isinstance(c, dict):
            raise InputError("each claim must be a mapping", field=f"claims[{i}]")
        cid = str(c.get("id", f"claim-{i + 1}"))
        if cid in ids:
            raise InputError(f"duplicate claim id {cid!r}", field=f"claims[{i}].id")
        ids.add(cid)
        c = dict(c, id=cid)
        out.append(check_claim(c, b))
    summary = {v: sum(1 for r in out if r["verdict"] == v) for v in VERDICTS}
    return {"claims": out, "summary": {k: v for k, v in summary.items() if v},
            "band": {"source": b.source, "overall_p90_abs_rel_error": b.overall}}
