"""Plan targets: the ``target_*`` fields, the short names people give them, and safety margins.

=================================  ==========================================  =========
field                              compared with                               meets if
=================================  ==========================================  =========
``target_time_per_output_token_s``  ``time_per_output_token_s``                 ≤ target
``target_step_latency_s``           ``step_latency_s``                          ≤ target
``target_ttft_s``                   ``ttft_s``                                  ≤ target
``target_e2e_latency_s``            ``e2e_latency_s``                           ≤ target
``target_tokens_per_s``             ``tokens_per_s`` (aggregate over the batch)  ≥ target
``target_tokens_per_s_per_seq``     ``tokens_per_s_per_seq``                    ≥ target
=================================  ==========================================  =========

Safety margin (``margin``): the model's predictions carry the validation error band
(``validation/error_band.yaml``: p90 |predicted − measured| / measured). A prediction p within a
relative error m of the truth a satisfies p/(1+m) ≤ a ≤ p/(1−m), so a latency target T is met for
sure when p ≤ T·(1 − m) and a throughput target when p ≥ T·(1 + m). ``margin='band'`` takes m per
target from the band of the target's metric; a number is used as m for every target. Without a
margin, ``note`` says when the chosen plan's prediction lies within the band of a target.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import InputError, suggest

# target field -> (output key, sense): 'max' = the output must not exceed the target
TARGETS = {
    "target_time_per_output_token_s": ("time_per_output_token_s", "max"),
    "target_step_latency_s": ("step_latency_s", "max"),
    "target_ttft_s": ("ttft_s", "max"),
    "target_e2e_latency_s": ("e2e_latency_s", "max"),
    "target_tokens_per_s": ("tokens_per_s", "min"),
    "target_tokens_per_s_per_seq": ("tokens_per_s_per_seq", "min"),
}
#: short names people use for a target -> the target field (for "did you mean")
TARGET_ALIASES = {"tpot": "target_time_per_output_token_s", "itl": "target_time_per_output_token_s",
                  "per_token": "target_time_per_output_token_s", "per_output": "target_time_per_output_token_s",
                  "ttft": "target_ttft_s", "first_token": "target_ttft_s", "e2e": "target_e2e_latency_s",
                  "end_to_end": "target_e2e_latency_s", "step": "target_step_latency_s",
                  "throughput": "target_tokens_per_s", "per_seq": "target_tokens_per_s_per_seq"}
#: plan options split off with the targets (:func:`costmodel.analysis.plan.plan`)
OPTIONS = ("prices", "max_devices", "max_batch", "parallelism", "margin")


# ----------------------------------------------------------------------------- fields

def split_targets(fields: dict) -> tuple[dict, dict, dict]:
    """(record fields, {target field: float}, {plan option: value}) from one flat mapping."""
    record, targets, options = {}, {}, {}
    for k, v in fields.items():
        key = str(k).strip()
        if key.startswith("target_"):
            if key not in TARGETS:
                raise InputError(f"unknown target{suggest(key, TARGETS, TARGET_ALIASES)}", field=key,
                                 allowed=", ".join(TARGETS))
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise InputError(f"must be a number, got {v!r}", field=key) from None
            if not np.isfinite(x) or x <= 0:
                raise InputError(f"must be a positive number, got {v!r}", field=key)
            targets[key] = x
        elif key in OPTIONS:
            options[key] = v
        else:
            record[key] = v
    return record, targets, options


# ----------------------------------------------------------------------------- safety margin

def _band():
    from costmodel.analysis.claims_load import load_error_band
    return load_error_band()


def margins_for(margin, targets: dict, batch_size=None) -> dict:
    """{target field: m}: ``margin`` None (no margin), 'band' (each target's metric's validation p90, for
    the regime of ``batch_size`` when given, as ``costmodel check`` uses it) or a number 0 ≤ m < 1 for
    every target."""
    if margin is None:
        return {}
    if str(margin).strip().lower() == "band":
        band = _band()
        return {k: band.for_metric(TARGETS[k][0], batch_size)[0] for k in targets}
    try:
        m = float(margin)
    except (TypeError, ValueError):
        raise InputError(f"must be 'band' or a fraction, got {margin!r}", field="margin",
                         allowed="band (the validation error band), or 0 <= m < 1 (0.2 = 20 %)") from None
    if not 0.0 <= m < 1.0:
        raise InputError(f"out of range: {margin!r}", field="margin",
                         allowed="band (the validation error band), or 0 <= m < 1 (0.2 = 20 %)")
    return {k: m for k in targets}


def tightened(targets: dict, margins: dict) -> dict:
    """Targets the prediction must meet: latency T·(1 − m), throughput T·(1 + m) (module docstring)."""
    return {k: v * (1.0 - margins.get(k, 0.0)) if TARGETS[k][1] == "max" else v * (1.0 + margins.get(k, 0.0))
            for k, v in targets.items()}


def band_note(row: dict, targets: dict, margins: dict) -> str | None:
    """A warning when a feasible plan's prediction is within the validation error band of a target."""
    if not targets or not row.get("feasible"):
        return None
    try:
        band = _band()
    except InputError:
        return None
    close = []
    for k, limit in targets.items():
        out, sense = TARGETS[k]
        b, basis = band.for_metric(out, row.get("batch_size"))
        p = float(row[out])
        within = p > limit * (1.0 - b) if sense == "max" else p < limit * (1.0 + b)
        if within and margins.get(k, 0.0) < b:
            close.append(f"{out} {p:.4g} is {abs(p - limit) / limit:.0%} from its target {limit:.4g}, inside the "
                         f"±{b:.0%} error band ({basis})")
    if not close:
        return None
    return ("; ".join(close) + ": the real figure may miss the target; rerun with --margin (margin=band) for a "
            "plan with that headroom")
