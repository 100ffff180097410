"""Capacity planning under load: replicas × parallelism × strategy for a request rate and SLOs.

``plan`` and ``recommend`` come here when the record carries ``request_rate`` (requests/s) with
``slo_ttft_s`` and/or ``slo_tpot_s`` (met at ``slo_percentile``, default p99). Every figure comes
from the serving simulator (:mod:`costmodel.serving`), whose step costs are the engine's.

For each hardware option, each tensor-parallel degree t (divisors of the heads up to
``max_devices``) and each strategy variant:

    r*        = the highest request rate one replica sustains within the SLOs
                (:func:`costmodel.serving.search.max_rate_search`: doubling, then bisection to 2 %)
    replicas  = ceil(request_rate / r*)
    devices   = replicas × devices per replica  (t, plus the draft's own device when it has one)

The answer is the variant with the fewest devices (the lowest cost per hour with prices); ties go to
the most headroom, replicas · r* / request_rate. It is then simulated whole — ``replicas`` instances
behind the least-loaded router at ``request_rate`` — and one more replica is added while that run
misses the SLOs (``verified``).

Strategy variants: the record's strategy, or autoregressive and (when the record names a
``draft_model``) speculative; ``recommend`` adds every family. Speculative: γ = 1, 2, … until r*
falls (unless ``gamma`` is given), for each draft placement (``same_device`` and ``separate_device``
for a draft with weights of its own, unless ``draft_placement`` is given). Trees: the record's
shape, else EAGLE trees of 4, 8 and 16 nodes.

``binding_constraint`` — what stops one replica above r*, read from the first failing run of the
search (rate just above r*), in this order:

* ``kv_capacity``   — the TTFT percentile fails (or requests stay unserved) while the KV cache is
  ≥ 90 % full or requests were preempted: admissions wait for free blocks;
* ``draft``         — the TPOT percentile fails and the draft takes ≥ 30 % of a step at that batch
  (:func:`costmodel.evaluate` at the run's mean running sequences), more than the interconnect;
* ``interconnect``  — the TPOT percentile fails and tensor-parallel communication takes ≥ 30 % of
  such a step;
* ``tpot``          — the TPOT percentile fails (batching more sequences per step slows every one);
* ``ttft_queueing`` — the TTFT percentile fails with KV to spare: steps are saturated and requests
  queue;
* ``memory_capacity`` — the deployment leaves no memory for a KV cache (it does not fit).

When even the lowest rate tried fails, ``max_rate_per_replica`` is 0 and the constraint is the one
that fails at that load (e.g. ``tpot``: one sequence alone is slower than the SLO).
"""

from __future__ import annotations

import math

from costmodel.errors import InputError
from costmodel.inputs.record import FIELD_NAMES

SLO_FIELDS = ("slo_ttft_s", "slo_tpot_s")
KV_FULL = 0.9
SHARE = 0.3
GAMMA_MAX = 8
TREE_NODES = (4, 8, 16)
#: requests per simulated run: enough for the p99 and for the stream to reach its steady state
NUM_REQUESTS = 2000
STRATEGY_KEYS = ("strategy", "draft_model", "gamma", "draft_placement", "tree_nodes", "tree_width",
                 "tree_depth", "tree_parents", "tree_shape")


def under_load(fields: dict) -> bool:
    """The record asks for planning under load (it carries a request rate)."""
    return fields.get("request_rate") not in (None, "")


def _pkey(pct: float) -> str:
    return "p99" if pct >= 99 else "p90" if pct >= 90 else "p50"


# ----------------------------------------------------------------------------- one configuration
def _share(fields: dict, batch: float) -> tuple[float, float]:
    """(draft share, interconnect share) of a static step at ``batch`` sequences (evaluate)."""
    from costmodel.engine.evaluate import evaluate
    f = {k: v for k, v in fields.items() if k in FIELD_NAMES}
    f["batch_size"] = max(1, int(round(batch)))
    try:
        r = evaluate(f)
    except InputError:
        return 0.0, 0.0
    step = float(r["step_latency_s"]) or 1.0
    return float(r.get("draft_time_per_step_s") or 0.0) / step, float(r.get("time_interconnect_s") or 0.0) / step


def classify(res: dict, w, fields: dict) -> tuple[str, str]:
    """(binding constraint, words with the numbers) for a run that misses the SLOs (module docstring)."""
    key = _pkey(w.slo_percentile)
    ttft, tpot = res["ttft_s"][key], res["tpot_s"][key]
    ttft_bad = w.slo_ttft_s is not None and ttft is not None and ttft > w.slo_ttft_s
    tpot_bad = w.slo_tpot_s is not None and tpot is not None and tpot > w.slo_tpot_s
    unserved = res["requests_completed"] < res["requests_arrived"] - res["requests_rejected"]
    kv = res["kv_utilisation_mean"]
    pre = res["preemptions"]
    rate = res.get("request_rate")
    at = f"at {rate:.3g} req/s" if isinstance(rate, (int, float)) else "under this load"
    nrun = res["mean_running_seqs"]
    ttft_txt = f"{key} TTFT {ttft:.4g} s" + (f" > {w.slo_ttft_s:g} s" if ttft_bad else "") if ttft is not None else ""
    tpot_txt = (f"{key} TPOT {tpot * 1e3:.4g} ms" + (f" > {w.slo_tpot_s * 1e3:g} ms" if tpot_bad else "")
                if tpot is not None else "")
    seen = ", ".join(t for t in (ttft_txt, tpot_txt) if t)
    kv_txt = f"KV cache {kv:.0%} full of {res['kv_capacity_tokens']} tokens, {pre} preemptions"
    if (ttft_bad or unserved) and (kv >= KV_FULL or pre > 0):
        return "kv_capacity", f"{at}: {seen}; {kv_txt}: admissions wait for free KV blocks"
    if tpot_bad:
        draft, comm = _share(fields, nrun)
        base = (f"{at}: {seen} with {nrun:.0f} sequences per step on average" if nrun >= 1.5 else
                f"one sequence alone: {seen}")
        if draft >= SHARE and draft >= comm:
            return "draft", base + f"; the draft takes {draft:.0%} of a step at that batch"
        if comm >= SHARE:
            return "interconnect", base + f"; tensor-parallel communication takes {comm:.0%} of a step at that batch"
        return "tpot", base + (" (a bigger batch makes every step slower)" if nrun >= 1.5 else "")
    return "ttft_queueing", (f"{at}: {seen}; steps are saturated and requests queue ({nrun:.0f} sequences "
                             f"running, {kv_txt})")


def max_rate_of(fields: dict, workload: dict) -> dict:
    """r* of one replica, its devices and what binds it. ``fields``: record fields of the variant."""
    from costmodel.serving.api import split_fields
    from costmodel.serving.search import max_rate_search
    try:
        rec, w = split_fields(fields, workload)
        out = max_rate_search(rec, w.replace(request_rate=1.0))
    except InputError as exc:
        if "no memory for the KV cache" in str(exc):
            return {"max_rate_per_replica": 0.0, "binding_constraint": "memory_capacity", "detail": str(exc),
                    "devices_per_replica": None}
        raise
    best = out.get("at_max")
    row = {"max_rate_per_replica": float(out["max_request_rate"]),
           "devices_per_replica": best["n_devices_total"] if best else rec.n_devices}
    fail = out.get("at_fail")
    if fail is None:
        row.update(binding_constraint=None, detail=out.get("note", "the SLOs held at every rate tried"))
    else:
        row["binding_constraint"], row["detail"] = classify(
            fail, w, dict(fields, prompt_len=rec.prompt_len, gen_len=rec.gen_len))
        if not best:
            row["detail"] = "even at low load, " + row["detail"]
    if best:
        key = _pkey(w.slo_percentile)
        row["at_max"] = {"ttft_s": best["ttft_s"][key], "tpot_s": best["tpot_s"][key],
                         "mean_running_seqs": best["mean_running_seqs"], "kv_utilisation_mean":
                         best["kv_utilisation_mean"], "throughput_tokens_per_s": best["throughput_tokens_per_s"]}
    return row


# ----------------------------------------------------------------------------- variants
def _has_own_weights(draft) -> bool:
    return str(draft or "").strip().lower() not in ("", "none", "medusa", "self", "eagle", "mtp")


def strategy_variants(fields: dict, families=None) -> list:
    """[(family, {record fields to set}, tune_gamma)] for one configuration."""
    strat = str(fields.get("strategy") or "").strip().lower()
    if families is None:
        families = [strat] if strat else ["autoregressive"] + (["speculative"] if fields.get("draft_model") else [])
    out = []
    for fam in families:
        if fam == "autoregressive":
            out.append((fam, {"strategy": fam, "draft_model": None, "gamma": None}, False))
        elif fam == "speculative":
            draft = fields.get("draft_model")
            if not draft:
                from costmodel.analysis.recommend_variants import compatible_drafts
                ds = compatible_drafts(fields["model"])
                draft = ds[0] if ds else "none"
            places = [fields["draft_placement"]] if fields.get("draft_placement") else \
                (["same_device", "separate_device"] if _has_own_weights(draft) else ["same_device"])
            for p in places:
                out.append((fam, {"strategy": fam, "draft_model": draft, "draft_placement": p},
                            fields.get("gamma") in (None, "")))
        elif fam == "tree":
            if any(fields.get(k) not in (None, "") for k in ("tree_nodes", "tree_width", "tree_parents")):
                out.append((fam, {"strategy": fam}, False))
            else:
                for n in TREE_NODES:
                    out.append((fam, {"strategy": fam, "draft_model": fields.get("draft_model") or "eagle",
                                      "tree_nodes": n, "tree_shape": "optimal"}, False))
        elif fam != "shared_prefix":
            raise InputError(f"strategy {fam!r} cannot be planned under load", field="strategy",
                             allowed="autoregressive, speculative, tree")
    return out


def _gamma_tuned(fields: dict, workload: dict) -> dict:
    """γ = 1, 2, … while r* grows (stops at the first fall); the best row, with ``gammas_tried``."""
    best, tried = None, {}
    for g in range(1, GAMMA_MAX + 1):
        row = max_rate_of(dict(fields, gamma=g), workload)
        row["gamma"] = g
        tried[g] = row["max_rate_per_replica"]
        if row["binding_constraint"] == "memory_capacity":
            best = best or row
            break
        if best is not None and row["max_rate_per_replica"] < best["max_rate_per_replica"]:
            break
        if best is None or row["max_rate_per_replica"] > best["max_rate_per_replica"]:
            best = row
    best["gammas_tried"] = tried
    return best


def evaluate_variant(fields: dict, workload: dict, fam: str, set_fields: dict, tune: bool, rate: float) -> dict:
    """r*, replicas and devices of one strategy variant (γ tuned when ``tune``)."""
    f = dict(fields)
    if fam == "autoregressive":
        for k in STRATEGY_KEYS:
            f.pop(k, None)
    for k, v in set_fields.items():
        if v is None:
            f.pop(k, None)
        else:
            f[k] = v
    row = _gamma_tuned(f, workload) if tune else max_rate_of(f, workload)
    if fam == "speculative" and "gamma" not in row:
        row["gamma"] = int(float(f.get("gamma") or 4))
    if fam == "speculative" and tune:
        f["gamma"] = row["gamma"]
    r = row["max_rate_per_replica"]
    row["replicas"] = math.ceil(rate / r - 1e-9) if r > 0 else None
    dev = row["devices_per_replica"]
    row["n_devices_total"] = row["replicas"] * dev if row["replicas"] and dev else None
    row.update(strategy=fam, fields=f, tensor_parallel=int(f.get("tensor_parallel") or f.get("n_devices") or 1))
    for k in ("draft_model", "draft_placement", "tree_nodes"):
        if f.get(k) not in (None, ""):
            row[k] = f[k]
    return row


# ----------------------------------------------------------------------------- the plan
def _tp_options(fields: dict, max_devices: int) -> list:
    """Tensor-parallel degrees per replica: the record's, else divisors of the heads ≤ max_devices."""
    if fields.get("n_devices") not in (None, ""):
        n = int(str(fields["n_devices"]).strip())
        tp = fields.get("tensor_parallel")
        return [(n, int(str(tp).strip()) if tp not in (None, "") else n)]
    from costmodel.engine.parallel import divisors
    from costmodel.inputs.model import load_model
    heads = load_model(fields["model"]).n_heads
    return [(t, t) for t in divisors(heads) if t <= max_devices]


def plan_one_hardware(fields: dict, workload: dict, rate: float, max_devices: int, families=None,
                      price=None) -> tuple[dict | None, list]:
    """(best row or None, every row tried) on one hardware option."""
    variants = strategy_variants(fields, families)
    rows, best = [], None

    def cost(r):
        return (r["n_devices_total"] * (price if price is not None else 1.0),
                -r["replicas"] * r["max_rate_per_replica"] / rate)

    for n, tp in _tp_options(fields, max_devices):
        if best is not None and n >= best["n_devices_total"]:
            break                        # one replica alone already needs as many devices
        base = dict(fields, n_devices=n, tensor_parallel=tp, pipeline_parallel=1)
        for fam, set_fields, tune in variants:
            row = evaluate_variant(base, workload, fam, set_fields, tune, rate)
            row["n_devices"] = n
            rows.append(row)
            if row["n_devices_total"] and (best is None or cost(row) < cost(best)):
                best = row
    return best, rows


def verify(row: dict, workload: dict, rate: float, tries: int = 3) -> dict:
    """Simulate the whole deployment at ``rate``; add a replica while it misses the SLOs."""
    from costmodel.serving.api import simulate, split_fields
    from costmodel.serving.metrics import meets_slo
    rec, w = split_fields(row["fields"], workload)
    n_req = min((w.num_requests or NUM_REQUESTS) * max(1, row["replicas"] // 2), 8000)
    key = _pkey(w.slo_percentile)
    for _ in range(tries):
        ww = w.replace(request_rate=rate, replicas=row["replicas"], num_requests=n_req, duration_s=None)
        res, _ = simulate(rec, ww)
        ok = meets_slo(res, ww)
        if ok:
            break
        row["replicas"] += 1
        row["n_devices_total"] = row["replicas"] * row["devices_per_replica"]
    return {"meets_slo": ok, "replicas": row["replicas"], "requests": n_req, "ttft_s": res["ttft_s"][key],
            "tpot_s": res["tpot_s"][key], "percentile": key, "mean_running_seqs_per_replica":
            res["mean_running_seqs"] / row["replicas"], "kv_utilisation_mean": res["kv_utilisation_mean"],
            "throughput_tokens_per_s": res["throughput_tokens_per_s"]}


PUBLIC = ("hardware", "strategy", "gamma", "draft_model", "draft_placement", "tree_nodes", "n_devices",
          "tensor_parallel", "devices_per_replica", "max_rate_per_replica", "replicas", "n_devices_total",
          "binding_constraint", "detail", "gammas_tried", "at_max")


def _public(row: dict) -> dict:
    return {k: row[k] for k in PUBLIC if k in row}


def _cfg_words(row: dict) -> str:
    s = row["strategy"]
    if s == "speculative":
        s += f" (draft {row.get('draft_model')}, γ={row.get('gamma')}, {row.get('draft_placement', 'same_device')})"
    elif s == "tree":
        s += f" ({row.get('tree_nodes') or 'given'} nodes)"
    return s


def plan_under_load(fields: dict, *, hardware: list, price_info=None, max_devices: int = 64,
                    families=None) -> dict:
    """The deployment with the fewest devices (or the lowest cost) serving ``request_rate`` within
    the SLOs; see the module docstring."""
    rec, wl, rate = _record_and_workload(fields)
    answers, all_rows = [], []
    for hw in hardware:
        price = price_info["prices"].get(hw.lower()) if price_info else None
        best, rows = plan_one_hardware(dict(rec, hardware=hw), wl, rate, max_devices, families, price)
        for r in rows:
            r["hardware"] = hw
        all_rows += rows
        if best is not None:
            best = dict(best, hardware=hw)
            best["verified"] = verify(best, wl, rate)
            if price is not None:
                best["price_per_device_hour"] = price
                best["cost_per_hour"] = price * best["n_devices_total"]
            answers.append(best)
    cands = [_public(r) for r in all_rows]
    targets = {k: float(wl[k]) for k in SLO_FIELDS if k in wl}
    pct = _pkey(float(wl.get("slo_percentile", 99)))
    slo_words = " and ".join(f"{pct} {k[4:-2].upper()} ≤ {v:g} s" for k, v in targets.items())
    if not answers:
        closest = max(all_rows, key=lambda r: r["max_rate_per_replica"]) if all_rows else None
        out = {"feasible": False, "request_rate": rate, "slo": targets, "candidates": cands,
               "binding_constraint": closest["binding_constraint"] if closest else None}
        out["reason"] = (f"no configuration within {max_devices} devices per replica meets {slo_words} at any load"
                         + (f"; the closest ({_cfg_words(closest)}, TP {closest['tensor_parallel']} on "
                            f"{closest['hardware']}): {closest['detail']}" if closest else ""))
        return out
    answers.sort(key=lambda a: (a.get("cost_per_hour", a["n_devices_total"]),
                                -a["replicas"] * a["max_rate_per_replica"] / rate))
    best = answers[0]
    out = {"feasible": bool(best["verified"]["meets_slo"]), "request_rate": rate, "slo": targets}
    out.update(_public(best))
    for k in ("price_per_device_hour", "cost_per_hour", "verified"):
        if k in best:
            out[k] = best[k]
    out["reason"] = _under_load_reason(best, all_rows, rate, slo_words)
    if len(answers) > 1:
        out["options"] = [_public(a) | {k: a[k] for k in ("cost_per_hour",) if k in a} for a in answers]
    out["candidates"] = cands
    return out


def _record_and_workload(fields: dict) -> tuple[dict, dict, float]:
    """(record fields, workload fields, request rate) of a plan under load, the workload checked: SLOs
    given, a positive finite rate, no replica or instance counts (the plan chooses them)."""
    from costmodel.serving.workload import WORKLOAD_FIELDS
    wl = {k: fields[k] for k in WORKLOAD_FIELDS if k in fields and fields[k] not in (None, "")}
    rec = {k: v for k, v in fields.items() if k not in WORKLOAD_FIELDS and k not in ("batch_size",)}
    for k in ("prompt_len", "gen_len"):
        if k in fields:
            wl[k] = fields[k]
    if not any(wl.get(k) not in (None, "") for k in SLO_FIELDS):
        raise InputError("planning under load needs slo_ttft_s and/or slo_tpot_s", field="slo_ttft_s")
    try:
        rate = float(wl.pop("request_rate"))
    except (TypeError, ValueError):
        raise InputError("must be a number of requests per second", field="request_rate") from None
    if not math.isfinite(rate) or rate <= 0:
        raise InputError(f"must be a positive, finite rate, got {rate:g}", field="request_rate")
    for k in ("replicas", "max_concurrency", "prefill_instances", "decode_instances", "duration_s"):
        if k in wl:
            raise InputError("planning under load chooses the replicas of an open-loop Poisson stream",
                             field=k, allowed="leave it out")
    wl.setdefault("num_requests", NUM_REQUESTS)
    return rec, wl, rate


def _under_load_reason(best: dict, all_rows: list, rate: float, slo_words: str) -> str:
    """Why the chosen deployment: what one replica sustains and what binds it above that rate, the best
    smaller TP and the best other strategy at the same TP, and whether the whole still misses the SLOs."""
    reason = (f"{best['replicas']} replica(s) × TP {best['tensor_parallel']} of {_cfg_words(best)} on "
              f"{best['hardware']} = {best['n_devices_total']} devices for {rate:g} req/s: one replica sustains "
              f"{best['max_rate_per_replica']:.3g} req/s within {slo_words}; above that rate it is bound by "
              f"{best['binding_constraint']} ({best['detail']})")
    others = [r for r in all_rows if r is not best and r.get("n_devices_total") and r["hardware"] == best["hardware"]]
    fewer = [r for r in all_rows if r["hardware"] == best["hardware"] and r["tensor_parallel"] < best["tensor_parallel"]]
    if fewer:
        f = max(fewer, key=lambda r: r["max_rate_per_replica"] / max(r["devices_per_replica"] or 1, 1))
        reason += (f"; TP {f['tensor_parallel']} ({_cfg_words(f)}) sustains {f['max_rate_per_replica']:.3g} "
                   f"req/s per replica → " + (f"{f['n_devices_total']} devices" if f["n_devices_total"] else
                                              "infeasible") + f", bound by {f['binding_constraint']}")
    alt = [r for r in others if r["strategy"] != best["strategy"] and r["tensor_parallel"] == best["tensor_parallel"]]
    if alt:
        a = max(alt, key=lambda r: r["max_rate_per_replica"])
        reason += (f"; the best {a['strategy']} at the same TP sustains {a['max_rate_per_replica']:.3g} req/s "
                   f"per replica ({a['binding_constraint']})")
    if not best["verified"]["meets_slo"]:
        reason += "; the whole deployment still misses the SLOs in simulation (see verified)"
    return reason


def recommend_under_load(fields: dict, *, max_devices: int = 8) -> dict:
    """Which strategy serves ``request_rate`` within the SLOs on the fewest devices: every family
    (autoregressive, speculative with γ and draft placement tuned, EAGLE trees) planned as
    :func:`plan_under_load` on the record's hardware (and ``n_devices`` when given)."""
    hw = fields.get("hardware")
    if hw in (None, ""):
        raise InputError("recommending under load needs hardware", field="hardware")
    hws = [h.strip() for h in str(hw).split(",") if h.strip()]
    fams = ["autoregressive", "speculative", "tree"]
    plan = plan_under_load({k: v for k, v in fields.items() if k != "strategy"}, hardware=hws,
                           max_devices=max_devices, families=fams)
    rate = plan["request_rate"]
    per = {}
    for c in plan["candidates"]:
        if not c.get("n_devices_total"):
            per.setdefault(c["strategy"], c)
            continue
        b = per.get(c["strategy"])
        key = (c["n_devices_total"], -c["replicas"] * c["max_rate_per_replica"] / rate)
        if b is None or not b.get("n_devices_total") or key < (b["n_devices_total"],
                                                               -b["replicas"] * b["max_rate_per_replica"] / rate):
            per[c["strategy"]] = c
    cands = sorted(per.values(), key=lambda c: (c.get("n_devices_total") or math.inf,
                                                -(c["max_rate_per_replica"] / max(c["devices_per_replica"] or 1, 1))))
    rec = plan.get("strategy") if plan["feasible"] else None
    words = []
    for c in cands:
        if c.get("n_devices_total"):
            words.append(f"{_cfg_words(c)} needs {c['replicas']} × TP {c['tensor_parallel']} = "
                         f"{c['n_devices_total']} devices (one replica sustains {c['max_rate_per_replica']:.3g} "
                         f"req/s, then {c['binding_constraint']})")
        else:
            words.append(f"{c['strategy']} cannot meet the SLOs ({c['binding_constraint']})")
    reason = (f"{rec} serves {rate:g} req/s on the fewest devices: " if rec else
              "no strategy meets the SLOs: ") + "; ".join(words)
    return {"recommended": rec, "mode": "under load", "objective": "fewest devices for request_rate within the SLOs",
            "request_rate": rate, "slo": plan["slo"], "reason": reason, "plan": {k: v for k, v in plan.items()
                                                                                 if k != "candidates"},
            "candidates": cands, "notes": []}
