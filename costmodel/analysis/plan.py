"""Capacity planning (``costmodel plan``): the fewest devices and/or the largest batch that
fit and meet a target, and the cheapest of several hardware options given prices per device-hour.

Targets are record-like fields (``target_time_per_output_token_s=0.030``), split off before the
record is validated; the fields and what each is compared with: :mod:`costmodel.analysis.targets`.

A configuration is **feasible** when it fits (peak device memory ≤ usable) and meets every target.
Every figure comes from :func:`costmodel.evaluate` (so ``costmodel eval`` reproduces any answer).

Searches, chosen by what the record leaves out:

* **batch** (no ``batch_size``): the largest B in 1..max_batch that is feasible, from one vectorised
  evaluation over every B.
* **devices** (no ``n_devices``): candidates (tp, pp) with tp | heads, pp | layers and
  tp·pp ≤ max_devices (pp = 1 only with ``parallelism='tp'``); in increasing n = tp·pp, the first n
  with a feasible candidate wins; among its candidates the lowest time per output token (the largest
  batch first when the batch is searched too).
* **hardware** (several ids, or a prices file and no ``hardware``): each option planned as above;
  the cheapest feasible one wins: usd_per_hour = devices (draft device included) · price when the
  batch is fixed; usd_per_million_tokens = usd_per_hour / (3600 · tokens_per_s) · 1e6 when the batch
  is searched. Without prices: the fewest devices, then the lowest time per output token.

``binding_constraint`` says what stops a cheaper answer: for a device search, why the next smaller
device count fails; for a batch search, why the next batch fails; for a fixed configuration, why it
fails (or, when it is feasible, the resource that binds its step time):

* ``memory_capacity`` — it does not fit;
* ``target`` — it fits, but the target is missed (a bigger batch is slower per token);
* ``bandwidth`` | ``compute`` | ``interconnect`` | ``launch_overhead`` — fewer devices fit but miss the
  target, this resource binding their step time (memory or L2 bound → bandwidth);
* ``draft_model`` — it fits, but the draft model's passes take more than half of its step time (draft
  passes run on one device: more devices for the target do not shorten them);
* ``max_batch`` — the batch search reached its own limit.

Under load (the record carries ``request_rate`` with ``slo_ttft_s`` / ``slo_tpot_s``) the answer is
replicas × tensor parallelism × strategy from the serving simulator:
:mod:`costmodel.analysis.plan_load`.

Safety margin (``margin``): :mod:`costmodel.analysis.targets`.
When nothing within ``max_devices`` is feasible, ``feasible`` is false and ``binding_constraint`` says
why the closest configuration (the fastest one that fits, else the fastest) fails.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import InputError, shown
from costmodel.engine.evaluate import build_exec, evaluate, evaluate_arrays
from costmodel.engine.parallel import divisors
from costmodel.inputs.record import parse_record
from costmodel.analysis.plan_prices import add_price, prices_from_option
from costmodel.analysis.targets import TARGETS, band_note, margins_for, split_targets, tightened

BOUND_TO_CONSTRAINT = {"memory": "bandwidth", "l2": "bandwidth", "compute": "compute",
                       "interconnect": "interconnect", "launch": "launch_overhead"}
REPORTED = ("fits", "step_latency_s", "tokens_per_step", "time_per_output_token_s", "tokens_per_s_per_seq",
            "tokens_per_s", "ttft_s", "e2e_latency_s", "peak_device_memory_bytes", "usable_memory_bytes",
            "weights_bytes", "kv_cache_bytes", "bound", "time_interconnect_s", "speedup_vs_ar",
            "draft_time_per_step_s")
#: the draft is the bottleneck when its passes take more than this share of the step
DRAFT_BOTTLENECK_SHARE = 0.5


# ----------------------------------------------------------------------------- inputs

def _int_option(options, key, default, lo=1, hi=1 << 20):
    v = options.get(key, default)
    try:
        x = int(str(v).strip()) if not isinstance(v, int) else v
    except ValueError:
        raise InputError(f"must be an integer, got {shown(v)}", field=key) from None
    if not lo <= x <= hi:
        raise InputError(f"out of range: {x}", field=key, allowed=f"{lo}..{hi}")
    return x


def _hardware_list(value) -> list:
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [str(h).strip() for h in items if str(h).strip()]


# ----------------------------------------------------------------------------- feasibility

def _meets(res: dict, targets: dict):
    """Element-wise: every target met (arrays or scalars)."""
    ok = np.asarray(True)
    for key, limit in targets.items():
        out, sense = TARGETS[key]
        v = np.asarray(res[out], dtype=float)
        ok = ok & ((v <= limit * (1 + 1e-12)) if sense == "max" else (v >= limit * (1 - 1e-12)))
    return ok


def _draft_share(res: dict) -> float:
    """draft_time_per_step_s / step_latency_s (0 without a separate draft pass)."""
    d, t = float(res.get("draft_time_per_step_s") or 0.0), float(res["step_latency_s"])
    return d / t if t > 0 else 0.0


def _why(res: dict) -> str:
    """The constraint that makes one (scalar) evaluation infeasible; the bound resource when feasible
    (the draft model when its passes take most of the step)."""
    if not bool(res["fits"]):
        return "memory_capacity"
    if _draft_share(res) > DRAFT_BOTTLENECK_SHARE:
        return "draft_model"
    return BOUND_TO_CONSTRAINT.get(str(res["bound"]), str(res["bound"]))


def _explain(row: dict, why: str, targets: dict, draft: str | None) -> str:
    """The numbers behind ``why`` for one configuration, in words."""
    if why == "memory_capacity":
        return (f"peak {row['peak_device_memory_bytes'] / 1e9:.1f} GB > usable "
                f"{row['usable_memory_bytes'] / 1e9:.1f} GB per device")
    text = _fmt_miss(row, targets) if targets else ""
    if why == "draft_model":
        dtp = row.get("draft_tensor_parallel", 1)
        where = "one device" if dtp == 1 else f"{dtp} devices (draft_tensor_parallel={dtp})"
        d = (f"the draft model {draft} takes {row['draft_time_per_step_s'] * 1e3:.3g} ms of the "
             f"{row['step_latency_s'] * 1e3:.3g} ms step at gamma {row.get('gamma', '?')}; its passes run on "
             f"{where}, so more devices for the target do not shorten them: draft_tensor_parallel up to the "
             f"target's devices, a smaller draft or a lower gamma does, and draft_placement=separate_device "
             f"with draft_schedule=overlap can hide them")
        text = f"{text}; {d}" if text else d
    return text


def _largest_batch(rec_fields: dict, targets: dict, max_batch: int):
    """(largest feasible B or None, binding constraint of B + 1) for one configuration."""
    rec = parse_record(dict(rec_fields, batch_size=1))
    Bs = np.arange(1, max_batch + 1, dtype=float)
    try:
        res = evaluate_arrays(rec, {"batch_size": Bs}, with_baseline=False)
        fits = np.broadcast_to(np.asarray(res["fits"], dtype=bool), Bs.shape)
        ok = fits & np.broadcast_to(_meets(res, targets), Bs.shape)
    except InputError:
        # configurations priced one row at a time (hardware-optimised trees): bisect, assuming
        # feasibility is monotone in B (memory and time per token only grow with the batch)
        def feas(b):
            r = evaluate(dict(rec_fields, batch_size=b))
            return bool(r["fits"]) and bool(_meets(r, targets)), bool(r["fits"])
        lo, hi = 0, max_batch
        if feas(hi)[0]:
            return max_batch, "max_batch"
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if feas(mid)[0] else (lo, mid)
        if lo == 0:
            return None, ("memory_capacity" if not feas(1)[1] else "target")
        return lo, ("memory_capacity" if not feas(lo + 1)[1] else "target")
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None, ("memory_capacity" if not fits[0] else "target")
    b = int(idx[-1]) + 1
    if b == max_batch:
        return b, "max_batch"
    return b, ("memory_capacity" if not fits[b] else "target")


def _device_candidates(rec_fields: dict, parallelism: str, max_devices: int) -> list:
    """(tp, pp) pairs to try, in increasing n = tp·pp (then increasing pp)."""
    if rec_fields.get("n_devices") not in (None, ""):
        n = int(str(rec_fields["n_devices"]).strip())
        tp = rec_fields.get("tensor_parallel")
        pp = int(str(rec_fields.get("pipeline_parallel") or 1).strip())
        return [(int(str(tp).strip()) if tp not in (None, "") else n // pp, pp)]
    from costmodel.analysis.plan_spec import with_default_gamma
    ex = build_exec(parse_record(with_default_gamma(dict(rec_fields, batch_size=1, n_devices=1, tensor_parallel=None,
                                                         pipeline_parallel=None, draft_tensor_parallel=None))))
    m = ex.model
    pps = [1] if parallelism == "tp" else divisors(m.n_layers)
    cands = [(tp, pp) for tp in divisors(m.n_heads) for pp in pps if tp * pp <= max_devices]
    return sorted(cands, key=lambda c: (c[0] * c[1], c[1]))


def _config(rec_fields, tp, pp):
    d = {k: v for k, v in rec_fields.items() if k not in ("n_devices", "tensor_parallel", "pipeline_parallel")}
    return dict(d, n_devices=tp * pp, tensor_parallel=tp, pipeline_parallel=pp)


def _try(rec_fields: dict, targets: dict, tp: int, pp: int, batch_fixed: bool, max_batch: int) -> dict:
    """Evaluate one (tp, pp): at the given batch, or at the largest feasible batch; a chain's γ and a
    draft model's tensor parallelism tuned for it when the record leaves them open
    (:mod:`costmodel.analysis.plan_spec`)."""
    from costmodel.analysis.plan_spec import tune
    cfg, tuned = tune(_config(rec_fields, tp, pp), lambda res: np.asarray(res["fits"], dtype=bool) & _meets(res, targets),
                      batch_fixed, max_batch)
    row = {"n_devices": tp * pp, "tensor_parallel": tp, "pipeline_parallel": pp}
    if str(cfg.get("strategy", "")).strip().lower() in ("speculative", "spec"):
        from costmodel.analysis.plan_spec import with_default_gamma
        row["gamma"] = int(float(with_default_gamma(cfg).get("gamma") or 4))
        row["draft_tensor_parallel"] = int(float(cfg.get("draft_tensor_parallel") or 1))
    if tuned:
        row["tuned"] = tuned
    if batch_fixed:
        res = evaluate(cfg)
        row["batch_size"] = int(str(cfg["batch_size"]).strip())
    else:
        b, why = _largest_batch(cfg, targets, max_batch)
        row["batch_size"] = b
        row["batch_limited_by"] = why
        res = evaluate(dict(cfg, batch_size=b or 1))
    row["meets_target"] = bool(_meets(res, targets))
    row["feasible"] = bool(res["fits"]) and row["meets_target"] and row["batch_size"] is not None
    row["why_not"] = None if row["feasible"] else _why(res)
    row.update({k: res[k] for k in REPORTED if k in res})
    row["n_devices_total"] = res.get("n_devices_total", tp * pp)
    return row


def _rank_key(row, batch_fixed):
    """Best first: feasible, then (batch search) the largest batch, then the lowest time per token."""
    return (not row["feasible"], 0 if batch_fixed else -(row["batch_size"] or 0),
            row["time_per_output_token_s"])


def _plan_one(rec_fields, targets, parallelism, max_devices, max_batch, with_margin=False) -> dict:
    """The plan on one hardware: device configurations tried in order of device count (the batch searched
    in each unless fixed), stopping past the first count with a feasible one; the best of them."""
    goal = ("fit and meet the target" + ("s" if len(targets) > 1 else "")
            + (" with the safety margin" if with_margin else "")) if targets else "fit"
    draft = rec_fields.get("draft_model")
    batch_fixed = rec_fields.get("batch_size") not in (None, "")
    devices_fixed = rec_fields.get("n_devices") not in (None, "")
    cands = _device_candidates(rec_fields, parallelism, max_devices)
    tried, by_n = [], {}
    answer = None
    for tp, pp in cands:
        n = tp * pp
        if answer is not None and n > answer["n_devices"]:
            break
        row = _try(rec_fields, targets, tp, pp, batch_fixed, max_batch)
        tried.append(row)
        by_n.setdefault(n, []).append(row)
        if row["feasible"] and (answer is None or _rank_key(row, batch_fixed) < _rank_key(answer, batch_fixed)):
            answer = row
    if answer is None:
        return _finish(_infeasible(tried, targets, goal, draft, max_devices, devices_fixed), tried, targets)
    out = _feasible(answer, by_n, targets, goal, draft, max_batch, batch_fixed, devices_fixed)
    if out.get("binding_constraint") != "draft_model" and draft and _draft_share(answer) > DRAFT_BOTTLENECK_SHARE:
        # the draft dominates the chosen step: it, not the target, bounds the time per token (and so the
        # device count whenever that was set by a time target rather than by memory or the batch limit)
        out["step_bound_by"] = "draft_model"
        if out.get("binding_constraint") not in ("memory_capacity", "max_batch"):
            out["binding_constraint"] = "draft_model"
        out["reason"] += f"; the draft binds the step: {_explain(answer, 'draft_model', {}, draft)}"
    _speculation_note(out, answer)
    return _finish(out, tried, targets)


def _infeasible(tried: list, targets: dict, goal: str, draft, max_devices: int, devices_fixed: bool) -> dict:
    """The answer when no configuration is feasible: the closest one (fits first, then the shortest
    time per token), what it fails on and the next step to take."""
    best = min(tried, key=lambda r: (not r["fits"], r["time_per_output_token_s"]))
    out = dict(best, feasible=False, binding_constraint=best["why_not"])
    out["reason"] = (f"no configuration within {max_devices} devices can {goal}; the "
                     f"closest ({best['n_devices']} devices, TP {best['tensor_parallel']} × PP "
                     f"{best['pipeline_parallel']}) fails on {best['why_not']}" if not devices_fixed else
                     f"{best['n_devices']} device(s) fail on {best['why_not']}")
    out["reason"] += f" ({_explain(best, best['why_not'], targets, draft)})"
    out["next_step"] = ("raise --max-devices, use a smaller weight_dtype or a larger device"
                        if best["why_not"] == "memory_capacity" else
                        "relax the target, or try other hardware (hardware=a,b,c) or a smaller draft")
    return out


def _feasible(answer: dict, by_n: dict, targets: dict, goal: str, draft, max_batch: int, batch_fixed: bool,
              devices_fixed: bool) -> dict:
    """The chosen configuration with its binding constraint and reason: what fails with one device
    fewer, else what limits the batch, else what bounds the step."""
    out = dict(answer)
    n = answer["n_devices"]
    smaller = [m for m in by_n if m < n]
    if not devices_fixed and smaller:
        prev = min(by_n[max(smaller)], key=lambda r: (not r["fits"], r["time_per_output_token_s"]))
        why = out["binding_constraint"] = prev["why_not"]
        out["reason"] = (f"{n} device(s) (TP {answer['tensor_parallel']} × PP {answer['pipeline_parallel']}) is "
                         f"the fewest that {goal}; {max(smaller)} device(s) fail on {why} "
                         f"({_explain(prev, why, targets, draft)})")
        if not batch_fixed:
            out["reason"] += f"; batch {answer['batch_size']} is limited by {answer['batch_limited_by']}"
    elif not batch_fixed:
        out["binding_constraint"] = answer["batch_limited_by"]
        out["reason"] = (f"batch {answer['batch_size']} is the largest that {goal.replace('fit', 'fits', 1)}"
                         + ("" if answer["batch_limited_by"] == "max_batch" else
                            f"; the next batch fails on {answer['batch_limited_by']}")
                         + (f" (the batch search stops at --max-batch {max_batch})"
                            if answer["batch_limited_by"] == "max_batch" else ""))
    else:
        out["binding_constraint"] = _why(answer)
        out["reason"] = (f"feasible with {n} device(s); nothing smaller was tried" if devices_fixed else
                         "one device suffices") + f"; its step time is bound by {out['binding_constraint']}"
        if out["binding_constraint"] == "draft_model":
            out["reason"] += f" ({_explain(answer, 'draft_model', {}, draft)})"
    return out


def _speculation_note(out: dict, answer: dict) -> None:
    """Say what was tuned, and when speculation loses to plain decoding on the chosen configuration."""
    if "tuned" in answer:
        chosen = ", ".join(f"{k}={answer[k]} (of {v[0]}..{v[-1]})" for k, v in answer["tuned"].items())
        out["reason"] += f"; tuned for this batch: {chosen}"
    sp = answer.get("speedup_vs_ar")
    if sp is not None and sp < 1.0:
        out["note_speculation"] = (f"speculation is slower than plain decoding here (speedup {sp:.2f}): at batch "
                                   f"{answer.get('batch_size')} the draft passes and the verification of the extra "
                                   f"tokens cost more than the accepted tokens save; try strategy=autoregressive")


def _fmt_miss(row, targets) -> str:
    parts = []
    for key, limit in targets.items():
        out, sense = TARGETS[key]
        parts.append(f"{out} {row[out]:.4g} vs target {'≤' if sense == 'max' else '≥'} {limit:.4g}")
    return "; ".join(parts) or "no target"


def _finish(out, tried, targets) -> dict:
    out = {k: v for k, v in out.items() if k != "why_not"}
    out["targets"] = dict(targets)
    keys = ("n_devices", "tensor_parallel", "pipeline_parallel", "batch_size", "fits", "meets_target", "feasible",
            "time_per_output_token_s", "tokens_per_s", "peak_device_memory_bytes", "bound", "why_not")
    out["candidates"] = [dict({k: r.get(k) for k in keys},
                              **{k: r[k] for k in ("gamma", "draft_tensor_parallel") if k in r}) for r in tried]
    return out


# ----------------------------------------------------------------------------- entry point

def plan(record: dict, *, targets: dict | None = None, prices=None, max_devices: int | None = None,
         max_batch: int | None = None, parallelism: str | None = None, margin=None) -> dict:
    """Capacity plan for ``record`` (a flat mapping; ``target_*`` fields and the options below may be
    in it too). Returns a dict with ``hardware``, ``n_devices``, ``tensor_parallel``,
    ``pipeline_parallel``, ``batch_size``, the predicted figures of :func:`costmodel.evaluate`,
    ``feasible``, ``binding_constraint``, ``reason``, ``candidates`` (every configuration tried) and,
    with several hardware options, ``options`` (one answer each, best first) and the prices.

    Options: ``margin`` ('band' or a fraction: plan with that headroom under each target; module
    docstring), ``prices`` (path to a prices YAML, or its parsed mapping), ``max_devices`` (64),
    ``max_batch`` (1024), ``parallelism`` ('tp_pp' tries TP and TP×PP; 'tp' only TP). Search rules
    and ``binding_constraint`` values: module docstring.
    """
    if not isinstance(record, dict):
        raise InputError(f"a plan record must be a mapping of field: value, got {type(record).__name__}")
    rec_fields, opts, given_targets, targets, margins = _targets_and_options(
        record, targets, prices=prices, max_devices=max_devices, max_batch=max_batch, parallelism=parallelism,
        margin=margin)
    max_devices = _int_option(opts, "max_devices", 64, 1, 4096)
    max_batch = _int_option(opts, "max_batch", 1024, 1, 1 << 20)
    parallelism = str(opts.get("parallelism", "tp_pp")).strip().lower().replace("-", "_")
    if parallelism not in ("tp", "tp_pp"):
        raise InputError(f"unknown value {parallelism!r}", field="parallelism", allowed="tp, tp_pp")
    price_info = prices_from_option(opts.get("prices"))
    hws = _hardware_list(rec_fields.get("hardware"))
    if not hws and price_info:
        hws = sorted(price_info["prices"])
    if not hws:
        raise InputError("missing required field", field="hardware",
                         allowed="a hardware id or path, a comma-separated list of them, or a prices file")
    from costmodel.analysis.plan_load import plan_under_load, under_load
    if under_load(rec_fields):
        if targets:
            raise InputError("under load the targets are slo_ttft_s / slo_tpot_s", field=next(iter(targets)),
                             allowed="slo_ttft_s, slo_tpot_s with request_rate")
        if rec_fields.get("model") in (None, ""):
            raise InputError("missing required field", field="model")
        return plan_under_load(rec_fields, hardware=hws, price_info=price_info, max_devices=max_devices)
    for req in ("model", "prompt_len"):
        if rec_fields.get(req) in (None, ""):
            raise InputError("missing required field", field=req)
    # validate everything else once (unknown fields, bad values) before searching
    from costmodel.analysis.plan_spec import with_default_gamma
    probe = with_default_gamma(dict(rec_fields, hardware=hws[0]))
    probe.setdefault("batch_size", 1)
    parse_record({k: v for k, v in probe.items() if v not in (None, "")})

    answers = []
    for hw in hws:
        ans = _plan_one(dict(rec_fields, hardware=hw), targets, parallelism, max_devices, max_batch, bool(margins))
        ans = {"hardware": hw, **ans}
        if price_info is not None:
            add_price(ans, hw, price_info, several=len(hws) > 1)
        answers.append(ans)
    return _cheapest(answers, rec_fields, price_info, given_targets, targets, margins)


def _targets_and_options(record: dict, targets, **options) -> tuple:
    """(record fields, options, targets as given, targets with the margin, margins) from the flat
    ``record`` and the keyword ``targets`` and options (those not None override the record's)."""
    rec_fields, t2, opts = split_targets(record)
    if targets is not None and not isinstance(targets, dict):
        raise InputError(f"must be a mapping of target: value, got {type(targets).__name__}", field="targets",
                         allowed="e.g. {'tokens_per_s': 1000, 'e2e_latency_s': 2}")
    if targets:
        t2.update(split_targets({k if str(k).startswith("target_") else f"target_{k}": v
                                 for k, v in targets.items()})[1])
    targets = t2
    for key, val in options.items():
        if val is not None:
            opts[key] = val
    margins = margins_for(opts.get("margin"), targets, rec_fields.get("batch_size") or None)
    return rec_fields, opts, targets, tightened(targets, margins), margins


def _cheapest(answers: list, rec_fields: dict, price_info, given_targets: dict, targets: dict, margins) -> dict:
    """The best answer (feasible first, then cheapest: cost per hour at a fixed batch, else per million
    tokens, else the fewest devices), with the other options, the prices' source and the margins."""
    batch_fixed = rec_fields.get("batch_size") not in (None, "")

    def cost_key(a):
        if "cost_per_hour" in a:
            c = a["cost_per_hour"] if batch_fixed else (a["cost_per_million_tokens"] or float("inf"))
        else:
            c = a["n_devices_total"]
        return (not a["feasible"], c, a["time_per_output_token_s"])

    answers.sort(key=cost_key)
    best = dict(answers[0])
    if len(answers) > 1:
        best["objective"] = ("cost_per_hour" if batch_fixed else "cost_per_million_tokens") \
            if price_info else "fewest devices"
        best["options"] = [{k: v for k, v in a.items() if k != "candidates"} for a in answers]
    if price_info is not None:
        best["prices_source"] = price_info["source"]
    if margins:
        best["targets"] = given_targets
        best["margin"] = margins
        best["targets_with_margin"] = targets
    note = band_note(best, given_targets, margins)
    if note:
        best["note"] = note
    return best
