"""What a claim would need: the acceptance rate α at which the model reproduces a speculative or tree
claim's figure, found by inverting the engine numerically (bisection on α through
:func:`costmodel.evaluate`; no formula is restated here).

The figures a claim's acceptance moves are throughput, latency, tokens per step and the speedup over
AR (``ALPHA_METRICS``); each is monotone in α (more accepted tokens per step: higher throughput and
speedup, lower latency), so f(α) − claimed changes sign at most once on [0, ``ALPHA_MAX``].
"""

from __future__ import annotations

import math

#: figures that depend on the acceptance rate
ALPHA_METRICS = {"tokens_per_s", "tokens_per_s_per_seq", "step_latency_s", "time_per_output_token_s",
                 "e2e_latency_s", "speedup_vs_ar", "tokens_per_step"}
#: the largest acceptance rate tried (α < 1 for a record)
ALPHA_MAX = 0.999


def needed_acceptance_rate(value_at, claimed: float, iters: int = 14) -> tuple[float | None, float, float]:
    """(α with value_at(α) = claimed, value_at(0), value_at(ALPHA_MAX)); α is None when the claimed
    figure lies outside what α in [0, ALPHA_MAX] can give. Bisection: ``iters`` halvings of [0, 0.999]
    (14 → 6e-5 in α, finer than the two decimals reported)."""
    lo, hi = 0.0, ALPHA_MAX
    f_lo, f_hi = float(value_at(lo)), float(value_at(hi))
    if not (math.isfinite(f_lo) and math.isfinite(f_hi)) or not min(f_lo, f_hi) <= claimed <= max(f_lo, f_hi):
        return None, f_lo, f_hi
    rising = f_hi >= f_lo
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        above = float(value_at(mid)) >= claimed
        if above == rising:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi), f_lo, f_hi


def moves_with_alpha(f_lo: float, f_hi: float) -> bool:
    """Whether α changes the figure at all (a chain's step latency does not: γ is fixed)."""
    return abs(f_hi - f_lo) > 1e-9 * max(abs(f_lo), abs(f_hi))


def acceptance_text(alpha: float | None, f_lo: float, f_hi: float, given, fmt, kind: str = "point") -> str:
    """'the claim needs an acceptance rate α ≈ 0.93 (…)', for an inequality claim 'the claim holds only
    for α below 0.04 (…)', or 'no acceptance rate reaches it (…)'."""
    have = f" (the claim's record gives α = {float(given):g})" if given is not None else ""
    if alpha is not None:
        a = f"{alpha:.2f}" if alpha >= 0.005 else "0.01"
        if kind in ("point", "range"):
            return f"the claim needs an acceptance rate α ≈ {a}{have}" if alpha >= 0.005 else \
                f"the claim needs an acceptance rate α < {a}{have}"
        rising = f_hi >= f_lo
        below = (kind in ("lt", "le")) == rising        # 'value < x' holds below α when the value rises
        return f"the claim holds only for an acceptance rate α {'below' if below else 'above'} {a}{have}"
    return (f"no acceptance rate reaches it: α from 0 to {ALPHA_MAX} gives {fmt(min(f_lo, f_hi))} to "
            f"{fmt(max(f_lo, f_hi))}{have}")


def add_needed_alpha(fig, fields, rec, src, band, metric, cv, p, rel, compare) -> None:
    """For a speculative or tree claim's figure: the acceptance rate at which the engine gives the claimed
    value (``needed_acceptance_rate``, None when no α < 1 does; ``acceptance_note`` in words, also
    appended to the figure's reason). Nothing when α does not move the figure or the record fixes the
    per-rank acceptance (``rank_acceptance``)."""
    from costmodel.analysis.claims_model import Predictor, fmt_figure, parse_claim_record, unit_of
    if metric not in ALPHA_METRICS or rec.strategy not in ("speculative", "tree") or "rank_acceptance" in fields \
            or cv.kind not in ("point", "range", "lt", "le", "gt", "ge") or not isinstance(p, (int, float)):
        return
    claimed = cv.lo if cv.kind != "range" else (cv.lo if p < cv.lo else cv.hi)
    f = {k: v for k, v in fields.items() if k not in ("acceptance_rate", "mean_accepted_tokens")}

    def value_at(a):
        fa = dict(f, acceptance_rate=a)
        pr = Predictor(fa, parse_claim_record(fa, src), band)
        return pr.value(metric, rel, compare)[0] if rel else pr.value(metric)
    alpha, lo, hi = needed_acceptance_rate(value_at, float(claimed))
    if not moves_with_alpha(lo, hi):
        return
    unit = "" if rel and compare == "ratio" else unit_of(metric)
    fig["needed_acceptance_rate"] = None if alpha is None else round(alpha, 4)
    fig["acceptance_note"] = acceptance_text(alpha, lo, hi, fields.get("acceptance_rate"),
                                             lambda x: fmt_figure(x, unit), cv.kind)
    fig["reason"] += "; " + fig["acceptance_note"]
