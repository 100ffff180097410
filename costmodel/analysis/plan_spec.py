"""Speculative settings a capacity plan tunes per configuration: γ and the draft's tensor parallelism.

For a chain (``strategy=speculative``) the best draft length depends on the batch: at batch 1 the
target's pass is memory-bound and γ = 4–8 pays, at batch 32 the verification of γ + 1 tokens per
sequence and γ draft passes cost real time and γ = 1–2 (or no speculation) wins. So, per
configuration (devices, batch):

* **γ** — when the record does not give ``gamma`` and its acceptance is α (``acceptance_rate``) or
  α_1..α_k (``acceptance_by_position``; then γ ≤ k): every γ in 1..8 is evaluated and the feasible one
  (fits, meets the targets) with the most ``tokens_per_s`` wins. A τ alone was measured at one γ and
  does not say what another γ would accept: γ stays as given (default 4).
* **draft_tensor_parallel** — when the draft is a model of its own on the target's devices and the
  record does not give it: every divisor of the draft's heads up to the configuration's device count
  (its passes then split over that many devices, with their own all-reduces).

With the batch searched too, each (draft TP, γ) is evaluated over every batch at once; the largest
feasible batch wins, then the most tokens/s at that batch.
"""

from __future__ import annotations

import numpy as np

from costmodel.engine.evaluate import evaluate_arrays
from costmodel.engine.parallel import divisors
from costmodel.errors import InputError
from costmodel.inputs.fields import HEAD_DRAFTS, WEIGHTLESS_DRAFTS
from costmodel.inputs.model import load_model
from costmodel.inputs.record import parse_record

GAMMAS = tuple(range(1, 9))


def _given(fields: dict, key: str) -> bool:
    return fields.get(key) not in (None, "")


def with_default_gamma(fields: dict) -> dict:
    """``fields`` with γ = min(4, k) when it gives k < 4 acceptances by position and no γ (the default
    γ = 4 would need four), so that the record parses before γ is searched."""
    if _given(fields, "gamma") or not _given(fields, "acceptance_by_position"):
        return fields
    from costmodel.inputs.record import convert
    k = len(convert("acceptance_by_position", fields["acceptance_by_position"]))
    return fields if k >= 4 else dict(fields, gamma=k)


def gamma_choices(fields: dict, rec) -> tuple | None:
    """The γ values to try, or None (γ given, not a chain, or only τ known)."""
    if rec.strategy != "speculative" or _given(fields, "gamma"):
        return None
    if rec.acceptance_by_position is not None:
        return tuple(g for g in GAMMAS if g <= len(rec.acceptance_by_position))
    if rec.acceptance_rate is not None:
        return GAMMAS
    return None


def draft_tp_choices(fields: dict, rec) -> tuple:
    """Draft TP degrees to try: (given or 1,) unless a draft model shares the target's devices."""
    if rec.strategy not in ("speculative", "tree") or _given(fields, "draft_tensor_parallel") \
            or rec.draft_model in HEAD_DRAFTS + WEIGHTLESS_DRAFTS or rec.draft_placement != "same_device":
        return (rec.draft_tensor_parallel,)
    heads = load_model(rec.draft_model, field="draft_model").n_heads
    return tuple(d for d in divisors(heads) if d <= rec.n_devices)


def tune(cfg: dict, feasible, batch_fixed: bool, max_batch: int) -> tuple[dict, dict]:
    """(cfg with the chosen ``gamma`` / ``draft_tensor_parallel``, what was tuned) for one
    configuration; ``feasible(res)`` -> boolean array (fits and meets the targets)."""
    rec = parse_record(with_default_gamma(dict(cfg, batch_size=cfg.get("batch_size") if batch_fixed else 1)))
    gammas, dtps = gamma_choices(cfg, rec), draft_tp_choices(cfg, rec)
    if gammas is None and len(dtps) == 1:
        return cfg, {}
    g = np.asarray(gammas if gammas is not None else (rec.gamma,), dtype=float)
    best, best_key = None, None
    for dtp in dtps:
        r = rec.replace(draft_tensor_parallel=dtp)
        if batch_fixed:
            arrays = {"gamma": g}
        else:
            arrays = {"batch_size": np.arange(1, max_batch + 1, dtype=float)[:, None], "gamma": g[None, :]}
        try:
            res = evaluate_arrays(r, arrays, with_baseline=False)
        except InputError:            # e.g. a hardware-optimised tree, priced one row at a time
            return cfg, {}
        shape = np.broadcast_shapes(*(np.shape(v) for v in arrays.values()))
        ok = np.broadcast_to(np.asarray(feasible(res), dtype=bool), shape)
        tps = np.broadcast_to(np.asarray(res["tokens_per_s"], dtype=float), shape)
        if batch_fixed:
            rows, b = ok, int(rec.batch_size)
        else:
            feasible_b = np.flatnonzero(ok.any(axis=1))
            bi = int(feasible_b[-1]) if feasible_b.size else 0
            rows, tps, b = ok[bi], tps[bi], bi + 1
        j = int(np.argmax(np.where(rows, tps, -np.inf))) if rows.any() else int(np.argmax(tps))
        key = (bool(rows.any()), b if not batch_fixed else 0, float(tps[j]))
        if best_key is None or key > best_key:
            best, best_key = (dtp, int(g[j])), key
    dtp, gamma = best
    out = dict(cfg)
    tuned = {}
    if gammas is not None:
        out["gamma"] = gamma
        tuned["gamma"] = list(gammas)
    if len(dtps) > 1:
        out["draft_tensor_parallel"] = dtp
        tuned["draft_tensor_parallel"] = list(dtps)
    return out, tuned
