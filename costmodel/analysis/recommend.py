"""Which strategy to use: ``recommend(record)``, with or without a hardware profile.

Candidates (one *family* per strategy, each tuned for the record):

* ``autoregressive`` — plain decoding.
* ``speculative``   — the record's ``draft_model`` (a zoo id, ``none`` or ``self``), else the smallest
  zoo model with the target's vocabulary and at most 1/8 of its parameters (prompt lookup,
  ``none``, when the zoo has no such model); ``gamma`` as given, else the best of γ = 1..8.
* ``tree``          — the record's ``draft_model`` when it is ``medusa``/``eagle`` or a zoo model, else
  an EAGLE head (the default tree drafter of current serving stacks; Medusa heads are cheaper per
  step but accept less, which one shared α cannot express), with the record's tree shape if given,
  else the best of the node budgets 2, 4, …, 64 (the tree of that budget that maximises expected
  tokens per step for the rank model, :func:`costmodel.engine.tree.optimal_tree`).
* ``shared_prefix`` — only when ``n_branches`` > 1: the B prompts × n branches share their prefix;
  the other families then decode the same B·n sequences independently.

Every family uses the record's acceptance (α = ``acceptance_rate``, or τ = ``mean_accepted_tokens``
converted to α at the record's γ), else the documented default α = 0.7 (stated in the output).
The objective is aggregate ``tokens_per_s`` (the batch is the same for every candidate, so this is
also tokens/s per sequence); the choice only counts candidates that fit in memory.

Under load (``request_rate`` with ``slo_ttft_s`` / ``slo_tpot_s``): the family that serves the rate
within the SLOs on the fewest devices, :func:`costmodel.analysis.plan_load.recommend_under_load`.

Hardware-blind mode (no ``hardware``): the same comparison on every device of the zoo — or on
``samples`` devices drawn from an ``envelope`` of ranges (bandwidth, FLOP/s, L2, capacity; a Latin
hypercube in log space, :mod:`scipy.stats.qmc`) — giving per strategy

    win_probability[s]   = (1/N) Σ_devices [s is the best that fits]        (ties shared; Σ_s = 1)
    worst_case_ratio[s]  = min over the devices where s fits of  objective(s) / objective(best)
    fit_probability[s]   = share of the N devices where s fits

over the N devices where at least one strategy fits. The recommendation is the strategy with the
highest worst-case ratio — the one that "degrades gracefully" — among those that fit on at least
``FIT_SHARE`` (75%) of the devices the most widely fitting strategy fits on; ties go to the higher
win probability. Devices where a strategy does not fit are named in the reason.

The candidates and their evaluation live in ``recommend_variants``, the one-device reason in
``recommend_reasons``, the hardware-blind mode in ``recommend_blind``; this module is the entry point.
"""

from __future__ import annotations

import math
import os

import numpy as np

from costmodel.errors import InputError
from costmodel.engine.evaluate import evaluate_passes
from costmodel.inputs.hardware import Hardware, load_hardware
from costmodel.inputs.record import parse_record
from costmodel.analysis.recommend_blind import (ENVELOPE_KEYS, FIT_SHARE, MAX_SAMPLES, check_samples,
                                                recommend_blind, sample_envelope, zoo_hardware)
from costmodel.analysis.recommend_reasons import draft_sentence, explain, fmt_bytes, pass_shares
from costmodel.analysis.recommend_variants import (DEFAULT_ALPHA, FAMILIES, OBJECTIVES, acceptance_of,
                                                   clean_fields, compatible_drafts, evaluate_families,
                                                   pick_figures, record_on, variants)

#: the entry point, and the pieces other tools build on (re-exported from the modules that hold them)
__all__ = ["recommend", "recommend_on", "recommend_blind", "variants", "evaluate_families", "acceptance_of",
           "compatible_drafts", "pass_shares", "explain", "draft_sentence", "sample_envelope", "zoo_hardware",
           "OBJECTIVES", "FAMILIES", "DEFAULT_ALPHA", "ENVELOPE_KEYS", "FIT_SHARE", "MAX_SAMPLES"]


def recommend_on(fields: dict, hw, objective: str = "tokens_per_s") -> dict:
    """Recommendation for one device (zoo id, path or Hardware)."""
    fam, notes = variants(fields)
    ev = evaluate_families(fields, hw, objective=objective, fam=fam)
    cands = {}
    for name, e in ev.items():
        i = int(np.ravel(e["index"])[0])
        c = {"strategy": name, "config": e["configs"][i]}
        c.update(pick_figures(e["results"][i]))
        c["_goodness"] = float(np.ravel(e["goodness"])[0])
        cands[name] = c
    good = {k: c["_goodness"] for k, c in cands.items()}
    best_g = max(good.values())
    hw_label = hw.id if isinstance(hw, Hardware) else str(hw)
    for c in cands.values():
        c["ratio_to_best"] = (c["_goodness"] / best_g) if math.isfinite(best_g) and best_g > 0 and \
            math.isfinite(c["_goodness"]) else 0.0
    if not math.isfinite(best_g):
        for c in cands.values():
            c.pop("_goodness")
        return {"recommended": None, "hardware": hw_label, "objective": objective,
                "reason": f"nothing fits on {hw_label}: even autoregressive decoding needs "
                          f"{fmt_bytes(cands['autoregressive']['peak_device_memory_bytes'])} per device; "
                          f"`costmodel plan` (without n_devices) finds how many devices it needs",
                "candidates": list(cands.values()), "notes": notes}
    best = max(good, key=lambda k: (good[k], -FAMILIES.index(k)))
    ar_pass = evaluate_passes(record_on(fam["autoregressive"][0].fields, hw))["decode"].cost
    reason = explain(fields, hw, best, cands, ar_pass) + draft_sentence(cands, best)
    order = sorted(cands, key=lambda k: -cands[k]["ratio_to_best"])
    for c in cands.values():
        c.pop("_goodness")
    return {"recommended": best, "hardware": hw_label, "objective": objective, "reason": reason,
            "candidates": [cands[k] for k in order], "notes": notes}


def recommend(record, *, objective: str = "tokens_per_s", envelope: dict | None = None, samples: int = 64,
              seed: int = 0, hardware_list=None) -> dict:
    """Best strategy for ``record`` (a mapping of record fields; ``strategy`` is ignored).

    With ``hardware``: ``{"recommended", "reason", "candidates": [...]}`` — one candidate per strategy
    (its best configuration, figures and ``ratio_to_best``). Without: hardware-blind over the zoo
    (or ``hardware_list``, or ``samples`` devices drawn from ``envelope``), adding
    ``win_probability`` and ``worst_case_ratio`` per strategy (module docstring for the formulas).
    """
    if not isinstance(record, dict):
        raise InputError(f"recommend needs a mapping of record fields, got {type(record).__name__}", field="record")
    fields = {str(k).strip(): v for k, v in record.items()}
    from costmodel.analysis.plan_load import recommend_under_load, under_load
    if under_load(fields):
        return recommend_under_load(fields)
    for k in ("id", "metric", "value", "values", "text", "source", "notes"):
        fields.pop(k, None)
    for req in ("model", "batch_size", "prompt_len"):
        if clean_fields(fields).get(req) is None:
            raise InputError("missing required field", field=req,
                             allowed="model, batch_size and prompt_len (hardware optional: without it the "
                                     "recommendation is hardware-blind)")
    hw = clean_fields(fields).get("hardware")
    if hw is not None and envelope:
        raise InputError("give either hardware or an envelope, not both", field="hardware")
    if hw is not None:
        parse_record(dict(clean_fields(fields), strategy="autoregressive"), allow_meta=True)   # validate early
        return recommend_on(fields, hw, objective)
    fields.pop("hardware", None)
    check_samples(samples, seed)
    if envelope is not None and not isinstance(envelope, dict):
        raise InputError(f"must be a mapping key: (low, high), got {type(envelope).__name__}", field="envelope")
    if envelope:
        devices = sample_envelope(envelope, samples, seed)
        out = recommend_blind(fields, devices, objective)
        out["mode"] = f"hardware-blind: {len(devices)} devices sampled from the envelope"
        out["envelope"] = {k: [float(min(getattr(d, k) if k != 'matrix_flops_per_s' else d.matrix_peak('fp16')
                                         for d in devices)),
                               float(max(getattr(d, k) if k != 'matrix_flops_per_s' else d.matrix_peak('fp16')
                                         for d in devices))] for k in ENVELOPE_KEYS}
        if samples > 32:                     # keep the JSON readable; the summary keys carry the answer
            out.pop("per_hardware", None)
        return out
    if hardware_list is not None and (isinstance(hardware_list, (str, dict)) or not hasattr(hardware_list, "__iter__")):
        raise InputError(f"must be a list of hardware ids or paths, got {type(hardware_list).__name__}",
                         field="hardware_list")
    devices = [str(h) if os.sep in str(h) else load_hardware(h).id for h in hardware_list] if hardware_list \
        else zoo_hardware()
    out = recommend_blind(fields, devices, objective)
    out["mode"] = f"hardware-blind: the {len(devices)} devices of the zoo"
    return out
