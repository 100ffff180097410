"""A record with a ``gamma_schedule``: speculation whose γ depends on how many sequences run together.

At batch size B the schedule gives γ_B (:func:`costmodel.inputs.schedule.gammas_for`); the step is
priced as the strategy's own step at that γ:

* γ_B > 0: a chain speculates γ_B tokens (the record's ``gamma`` is replaced; a tree runs whole —
  its shape does not depend on γ);
* γ_B = 0: plain decoding — the step, its tokens per step (1) and ``speedup_vs_ar`` (1) are those of
  the autoregressive strategy, while the deployment is still the speculative one: the prefill (the
  draft's included), the memory (draft weights and KV) and the draft extras' entries (0: no draft
  pass ran) come from the speculative outcome at the schedule's smallest positive γ.

One acceptance figure describes the draft at every γ: a chain given only τ is read as the α with
τ(α, gamma) = τ at the record's ``gamma`` (Leviathan's formula inverted,
:func:`costmodel.engine.acceptance.alpha_from_tau`), and τ at γ_B follows from α. This is what the
serving simulator does step by step, so a static evaluate of a scheduled deployment is the
simulator's decode step at low load.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel.engine import acceptance
from costmodel.engine.roofline import Cost
from costmodel.engine.strategies.common import Ctx, Outcome
from costmodel.inputs.schedule import gammas_for, ranges


def unscheduled(rec):
    """The record without its schedule (the fields the strategies read)."""
    return rec.replace(gamma_schedule=None)


def scheduled_ctx(ctx: Ctx) -> tuple[Ctx, np.ndarray]:
    """(ctx at the scheduled γ — γ = 0 rows at the smallest positive γ of the schedule —, γ_B)."""
    rec = ctx.rec
    g = gammas_for(rec.gamma_schedule, ctx.B)
    positive = [x for _, _, x in ranges(rec.gamma_schedule) if x > 0]
    fill = float(min(positive)) if positive else 1.0
    kw = {"rec": unscheduled(rec)}
    if rec.strategy == "speculative":
        kw["gamma"] = np.where(g > 0, g, fill)
        if ctx.tau is not None:
            if rec.acceptance_by_position is None:
                kw["alpha"] = acceptance.alpha_from_tau(ctx.tau, ctx.gamma)
            kw["tau"] = None
    return dataclasses.replace(ctx, **kw), g


def select_cost(mask, a: Cost, b: Cost) -> Cost:
    """Elementwise ``a`` where ``mask`` else ``b`` (time, work, time by bound; ``b``'s operators)."""
    w = np.where
    return Cost(w(mask, a.time_s, b.time_s), w(mask, a.flops, b.flops), w(mask, a.hbm_bytes, b.hbm_bytes),
                {k: w(mask, a.by_bound[k], b.by_bound[k]) for k in b.by_bound}, b.ops)


def scheduled_outcome(ctx: Ctx, run_strategy, run_autoregressive) -> Outcome:
    """The outcome of a scheduled record: ``run_strategy(ctx)`` prices the record's strategy,
    ``run_autoregressive(ctx)`` plain decoding (both on the same Exec)."""
    sctx, g = scheduled_ctx(ctx)
    spec = run_strategy(sctx)
    spec = dataclasses.replace(spec, extras={**spec.extras, "scheduled_gamma": g})
    off = g == 0
    if not np.any(off):
        return spec
    rec_ar = sctx.rec.replace(strategy="autoregressive", draft_model=None)
    ar = run_autoregressive(dataclasses.replace(sctx, rec=rec_ar))
    extras = {}
    for k, v in spec.extras.items():
        if k == "draft_time_per_step_s":
            v = np.where(off, 0.0, v)
        elif k == "verify_time_s":
            v = np.where(off, ar.passes["decode"].cost.time_s, v)
        extras[k] = v
    if np.all(off):
        step = ar.step
        passes = {k: p for k, p in spec.passes.items() if k in ("prefill", "draft_prefill")}
        passes["decode"] = ar.passes["decode"]
    else:
        step = select_cost(off, ar.step, spec.step)
        passes = spec.passes
    tps = np.where(off, 1.0, spec.tokens_per_step)
    return dataclasses.replace(spec, step=step, tokens_per_step=tps, extras=extras, passes=passes)


def schedule_note(rec) -> str:
    """The output note of a scheduled record."""
    text = (f"gamma_schedule {rec.gamma_schedule}: γ for batch_size running sequences (output scheduled_gamma); "
            "at γ = 0 the step decodes plainly with the draft still loaded")
    if rec.strategy == "speculative" and rec.mean_accepted_tokens is not None and rec.acceptance_rate is None \
            and rec.acceptance_by_position is None:
        text += f"; τ is read as the α that gives it at gamma={rec.gamma}"
    return text


def off_mask(rec, batch_size) -> np.ndarray | None:
    """True where the schedule switches speculation off at ``batch_size`` (None without a schedule)."""
    if rec.gamma_schedule is None:
        return None
    return gammas_for(rec.gamma_schedule, batch_size) == 0
