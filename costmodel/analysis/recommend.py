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
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import numpy as np

from costmodel.errors import InputError, shown
from costmodel.engine.evaluate import build_exec, evaluate_arrays, evaluate_passes
from costmodel.inputs.hardware import Hardware, load_hardware
from costmodel.inputs.model import load_model
from costmodel.inputs.record import DRAFT_KINDS, parse_record

DEFAULT_ALPHA = 0.7
GAMMAS = tuple(range(1, 9))
TREE_BUDGETS = (2, 4, 8, 16, 32, 64)
TREE_DRAFTS = ("eagle",)
FAMILIES = ("autoregressive", "speculative", "tree", "shared_prefix")
#: objective -> +1 when higher is better, -1 when lower is better
OBJECTIVES = {"tokens_per_s": 1, "tokens_per_s_per_seq": 1, "time_per_output_token_s": -1,
              "e2e_latency_s": -1, "step_latency_s": -1}
#: envelope keys -> the Hardware field they set (SI units)
ENVELOPE_KEYS = {"bandwidth_bytes_per_s": "bandwidth", "matrix_flops_per_s": "flops", "l2_bytes": "l2",
                 "capacity_bytes": "capacity"}
ENVELOPE_BASE = "a100-80gb"
#: hardware-blind: a strategy is eligible when it fits on at least this share of the devices the
#: most widely fitting strategy fits on
FIT_SHARE = 0.75
STRATEGY_FIELDS = ("strategy", "draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens", "tree_width",
                   "tree_depth", "tree_nodes", "tree_shape", "tree_parents", "rank_acceptance",
                   "draft_kv_budget", "batch_sync", "draft_placement", "draft_schedule", "draft_tensor_parallel",
                   "acceptance_by_position", "draft_vocab_size")
FIGURE_KEYS = ("tokens_per_s", "tokens_per_s_per_seq", "step_latency_s", "tokens_per_step",
               "time_per_output_token_s", "ttft_s", "e2e_latency_s", "speedup_vs_ar", "bound",
               "peak_device_memory_bytes", "fits", "arithmetic_intensity", "hbm_bytes_per_step",
               "flops_per_step", "draft_time_per_step_s")


# --------------------------------------------------------------------------- candidates
@dataclass
class Variant:
    """One concrete configuration of a family: record fields plus optional numeric arrays."""

    family: str
    fields: dict
    arrays: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)     # what distinguishes it, for the output


def _clean(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if v is not None and not (isinstance(v, str) and not v.strip())}


def compatible_drafts(model_id) -> list:
    """Zoo models usable as a chain draft for ``model_id``: same vocabulary, ≤ 1/8 of its parameters,
    smallest first."""
    from costmodel.inputs.specs import zoo_ids
    target = load_model(model_id)
    out = []
    for i in zoo_ids("model_specs"):
        try:
            m = load_model(i)
        except InputError:
            continue
        if m.vocab_size == target.vocab_size and m.n_params * 8 <= target.n_params:
            out.append((m.n_params, i))
    return [i for _, i in sorted(out)]


def _draft_tp_choices(f: dict, draft) -> tuple:
    """Draft TP degrees the chain family tries: the given one; else, for a draft model sharing the
    target's devices, every divisor of its heads up to n_devices (1 otherwise)."""
    if "draft_tensor_parallel" in f:
        return (int(float(f["draft_tensor_parallel"])),)
    n = int(float(f.get("n_devices") or 1))
    if n == 1 or str(draft).lower() in DRAFT_KINDS or str(f.get("draft_placement", "same_device")).lower().replace(
            "-", "_") != "same_device":
        return (1,)
    from costmodel.engine.parallel import divisors
    return tuple(d for d in divisors(load_model(draft, field="draft_model").n_heads) if d <= n)


def acceptance_of(fields: dict) -> tuple[float, str | None]:
    """(α, note): the record's α, or α from its τ at its γ (default 4), or the default α."""
    a, tau = fields.get("acceptance_rate"), fields.get("mean_accepted_tokens")
    if a not in (None, ""):
        return float(a), None
    if fields.get("acceptance_by_position") not in (None, ""):
        from costmodel.inputs.record import convert
        a1 = convert("acceptance_by_position", fields["acceptance_by_position"])[0]
        return a1, f"the chain uses acceptance_by_position; the tree is compared at α = α_1 = {a1:g}"
    if tau not in (None, ""):
        from costmodel.engine.acceptance import alpha_from_tau
        g = int(float(fields.get("gamma") or 4))
        t = float(tau)
        from costmodel.inputs.rules import tau_exceeds_chain
        if t < 1.0 or tau_exceeds_chain(t, g):
            raise InputError(f"out of range: {t}", field="mean_accepted_tokens", allowed=f"1 <= τ <= gamma + 1 = {g + 1}")
        a = float(alpha_from_tau(t, g))
        return a, f"α = {a:.3f} from τ = {t:g} at γ = {g}"
    return DEFAULT_ALPHA, f"assumed α = {DEFAULT_ALPHA} (give acceptance_rate=… for your draft)"


def variants(fields: dict, gamma_axis: int = 0) -> tuple[dict, list]:
    """Candidate variants per family for a user record (mapping). ``gamma_axis``: how many trailing
    grid dimensions the γ array must broadcast over (it is put on a new leading axis).
    Returns ({family: [Variant, ...]}, notes)."""
    f = _clean(dict(fields))
    notes = []
    alpha, note = acceptance_of(f)
    if note:
        notes.append(note)
    base = {k: v for k, v in f.items() if k not in STRATEGY_FIELDS}
    n_br = int(float(f.get("n_branches") or 1))
    fam: dict = {}
    indep = dict(base)
    if n_br > 1:
        indep["batch_size"] = int(float(f["batch_size"])) * n_br if "batch_size" in f else None
        indep.pop("n_branches", None)
        indep.pop("shared_prefix_len", None)
        indep = _clean(indep)
        fam["shared_prefix"] = [Variant("shared_prefix", dict(base, strategy="shared_prefix"),
                                        config={"n_branches": n_br})]
    fam["autoregressive"] = [Variant("autoregressive", dict(indep, strategy="autoregressive"))]
    acc = {"acceptance_rate": alpha}
    for k in ("batch_sync", "draft_placement", "draft_schedule", "draft_kv_budget"):
        if k in f:
            acc[k] = f[k]
    # speculative (chain)
    user_draft = str(f.get("draft_model", "")).strip().lower() or None
    if user_draft and user_draft != "medusa":
        draft = f["draft_model"]
    else:
        ds = compatible_drafts(f["model"]) if "model" in f else []
        draft = ds[0] if ds else "none"
        if not ds:
            notes.append("no zoo model shares the target's vocabulary: speculative uses prompt lookup "
                         "(draft_model=none)")
    spec = dict(indep, strategy="speculative", draft_model=draft, **acc)
    gammas = GAMMAS
    if "acceptance_by_position" in f:
        spec.pop("acceptance_rate")
        spec["acceptance_by_position"] = f["acceptance_by_position"]
        gammas = tuple(range(1, min(max(GAMMAS), len(str(f["acceptance_by_position"]).split(","))
                                    if isinstance(f["acceptance_by_position"], str)
                                    else len(f["acceptance_by_position"])) + 1))
    if "draft_vocab_size" in f and str(draft).lower() == "eagle3":
        spec["draft_vocab_size"] = f["draft_vocab_size"]
    fam["speculative"] = []
    for dtp in _draft_tp_choices(f, draft):
        sd = dict(spec, draft_tensor_parallel=dtp) if dtp != 1 else dict(spec)
        cfg = {"draft_model": draft, **({"draft_tensor_parallel": dtp} if dtp != 1 else {})}
        if "gamma" in f:
            fam["speculative"].append(Variant("speculative", dict(sd, gamma=f["gamma"]),
                                              config=dict(cfg, gamma=int(float(f["gamma"])))))
        else:
            g = np.asarray(gammas, dtype=float).reshape((-1,) + (1,) * gamma_axis)
            fam["speculative"].append(Variant("speculative", dict(sd, gamma=min(4, max(gammas))), {"gamma": g},
                                              config=dict(cfg, gamma=list(gammas))))
    # tree
    fixed_shape = ("tree_width" in f and "tree_depth" in f) or "tree_parents" in f
    drafts = [user_draft] if user_draft in ("medusa", "eagle", "eagle3") else (
        [f["draft_model"]] if user_draft and user_draft not in DRAFT_KINDS else list(TREE_DRAFTS))
    tv = []
    for d in drafts:
        t = dict(indep, strategy="tree", draft_model=d, **acc)
        if "draft_tensor_parallel" in f and d not in DRAFT_KINDS:
            t["draft_tensor_parallel"] = f["draft_tensor_parallel"]
        if "draft_vocab_size" in f and d == "eagle3":
            t["draft_vocab_size"] = f["draft_vocab_size"]
        if "rank_acceptance" in f:
            t["rank_acceptance"] = f["rank_acceptance"]
        if "attention_kernel" in f:
            t["attention_kernel"] = f["attention_kernel"]
        if fixed_shape:
            for k in ("tree_width", "tree_depth", "tree_parents"):
                if k in f:
                    t[k] = f[k]
            tv.append(Variant("tree", t, config={"draft_model": d, **{k: f[k] for k in (
                "tree_width", "tree_depth") if k in f}}))
            continue
        cap = int(float(f["tree_nodes"])) if "tree_nodes" in f else max(TREE_BUDGETS)
        for n in [b for b in TREE_BUDGETS if b < cap] + [cap]:
            tt = dict(t, tree_nodes=n)
            cfg = {"draft_model": d, "tree_nodes": n}
            if "tree_depth" in f:
                tt["tree_depth"] = f["tree_depth"]
                cfg["tree_depth"] = int(float(f["tree_depth"]))
            tv.append(Variant("tree", tt, config=cfg))
    fam["tree"] = tv
    if not user_draft:
        notes.append(f"the chain draft ({draft}) and the tree's EAGLE head are compared at the same acceptance "
                     f"α = {alpha:.2f}; give draft_model= to compare another drafter")
    return fam, notes


def _record(fields: dict, hw):
    """Parse ``fields`` with hardware ``hw`` (zoo id or Hardware object)."""
    f = dict(fields)
    if isinstance(hw, Hardware):
        f["hardware"] = "a100-80gb"    # placeholder for parsing; replaced below
        return parse_record(f, allow_meta=True).replace(hardware=hw)
    f["hardware"] = hw
    return parse_record(f, allow_meta=True)


def _goodness(res: dict, objective: str) -> np.ndarray:
    v = np.asarray(res[objective], dtype=float)
    g = v if OBJECTIVES[objective] > 0 else 1.0 / np.maximum(v, 1e-300)
    return np.where(np.asarray(res["fits"], dtype=bool), g, -np.inf)


def evaluate_families(fields: dict, hw, arrays: dict | None = None, objective: str = "tokens_per_s",
                      fam=None) -> dict:
    """Best variant per family at every point of ``arrays`` (broadcasting grid axes).

    Returns {family: {"goodness": array (−inf where nothing fits), "results": [dict of arrays per
    variant-slice], "configs": [config per slice], "index": array of the best slice}}."""
    if objective not in OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}", field="objective", allowed=", ".join(OBJECTIVES))
    arrays = dict(arrays or {})
    grid_ndim = max((np.ndim(v) for v in arrays.values()), default=0)
    if fam is None:
        fam, _ = variants(fields, gamma_axis=grid_ndim)
    out = {}
    for name, vs in fam.items():
        results, configs = [], []
        for v in vs:
            rec = _record(v.fields, hw)
            a = dict(arrays)
            a.update(v.arrays)
            res = evaluate_arrays(rec, a)
            res.pop("_step_ops", None)
            res.pop("_extras", None)
            if "gamma" in v.arrays:                    # split the γ axis into slices
                for i, g in enumerate(np.ravel(v.arrays["gamma"])):
                    sl = {k: (np.broadcast_to(val, np.broadcast(val, res["step_latency_s"]).shape)[i]
                              if np.ndim(val) else val) for k, val in res.items()}
                    results.append(sl)
                    configs.append(dict(v.config, gamma=int(g)))
            else:
                results.append(res)
                configs.append(dict(v.config))
        shape = np.broadcast(*[np.asarray(r["step_latency_s"]) for r in results]).shape
        goods = np.stack([np.broadcast_to(_goodness(r, objective), shape) for r in results])
        idx = np.argmax(goods, axis=0)
        best = np.take_along_axis(goods, idx[None], axis=0)[0]
        out[name] = {"goodness": best, "results": results, "configs": configs, "index": idx}
    return out


def _pick(res: dict, i=None):
    """Scalar figures of one result (index ``i`` into grid arrays, or the only element)."""
    out = {}
    for k in FIGURE_KEYS:
        if k not in res:
            continue
        a = np.asarray(res[k])
        v = a.ravel()[0] if i is None else a[i] if a.ndim else a
        v = v.item() if hasattr(v, "item") else v
        out[k] = bool(v) if k == "fits" else (str(v) if isinstance(v, str) else float(v))
    return out


# --------------------------------------------------------------------------- reasons
def _fmt_bytes(b: float) -> str:
    return f"{b / 1e9:.1f} GB" if b >= 1e8 else f"{b / 1e6:.0f} MB"


def _ridge(fields: dict, hw) -> float:
    ex = build_exec(_record(dict(fields, strategy="autoregressive"), hw))
    return ex.matrix_flops_per_s / ex.hbm_bytes_per_s


#: the operators of a pass that multiply by weight matrices (costmodel.engine.ops.layer_ops)
WEIGHT_GEMMS = ("qkv_proj", "o_proj", "ffn", "moe_ffn", "router", "lm_head")


def pass_shares(cost) -> dict:
    """What a pass's HBM traffic is made of, from the engine's per-operator rows: ``weight_gemms``
    and ``attention`` (the KV cache read and written, q and o) as shares of the pass's bytes, and
    ``gemm_intensity``, the weight GEMMs' FLOPs per byte."""
    rows = [(name, float(np.ravel(f)[0]), float(np.ravel(h)[0])) for name, f, h, _t, _b in cost.ops]
    total = sum(h for _, _, h in rows)
    g_fl = sum(f for n, f, _ in rows if n in WEIGHT_GEMMS)
    g_hb = sum(h for n, _, h in rows if n in WEIGHT_GEMMS)
    att = sum(h for n, _, h in rows if n == "attention")
    nan = float("nan")
    return {"weight_gemms": g_hb / total if total else nan, "attention": att / total if total else nan,
            "gemm_intensity": g_fl / g_hb if g_hb else nan}


def explain(fields: dict, hw, best: str, cands: dict, ar_pass) -> str:
    """One line on why ``best`` wins, in terms of the binding resource of an AR step (``ar_pass``: the
    autoregressive candidate's decoding pass as the engine priced it, with its operator rows)."""
    B = int(float(fields.get("batch_size", 1)))
    n_br = int(float(fields.get("n_branches") or 1))
    seqs = B * n_br
    ar = cands["autoregressive"]
    bound = ar.get("bound", "memory")
    ai = ar.get("arithmetic_intensity", float("nan"))
    ridge = _ridge(fields, hw)
    moved = ar.get("hbm_bytes_per_step", float("nan"))
    share = pass_shares(ar_pass)
    where = f"batch {B}" + (f" × {n_br} branches" if n_br > 1 else "")
    if bound == "memory":
        n_dev = int(float(fields.get("n_devices") or 1))
        head = (f"memory-bound at {where}: an AR step moves {_fmt_bytes(moved)} in total ("
                + (f"{_fmt_bytes(moved / n_dev)} per device; " if n_dev > 1 else "")
                + f"{share['weight_gemms']:.0%} of it weight GEMMs, {share['attention']:.0%} attention over the KV "
                f"cache) at {ai:.0f} FLOP/B, below the device's ridge of {ridge:.0f} FLOP/B")
    elif bound == "compute":
        head = (f"compute-bound at {where}: the weight GEMMs of an AR step already run at about "
                f"{share['gemm_intensity']:.0f} FLOP/B ({seqs} tokens per weight read), above the device's ridge "
                f"of {ridge:.0f} FLOP/B")
    elif bound == "launch":
        head = f"launch-bound at {where}: an AR step is dominated by kernel launches and host overhead"
    else:
        head = f"{bound}-bound at {where}"
    b = cands[best]
    if best == "autoregressive":
        alt = max((k for k in cands if k != "autoregressive"), key=lambda k: cands[k].get("ratio_to_best", 0),
                  default=None)
        if alt is None:
            return head + "; no other strategy fits"
        a = cands[alt]
        if not a.get("fits", True):
            return head + f"; {alt} does not fit in memory"
        cost = a["step_latency_s"] / ar["step_latency_s"]
        why = ("verifying extra tokens multiplies the FLOPs of a step that has no spare compute"
               if bound == "compute" else "the extra tokens per step do not pay for the draft and verification")
        return (head + f"; {why}: the best {alt} ({_cfg_text(a['config'])}) costs {cost:.2f}× an AR step "
                f"for {a['tokens_per_step']:.2f} tokens → {_r(a['speedup_vs_ar'])}× AR")
    if best == "shared_prefix":
        kv = cands["shared_prefix"]
        return (head + f"; the shared prefix is stored and read once for the {n_br} branches of each prompt: "
                f"a step moves {_fmt_bytes(kv['hbm_bytes_per_step'])} instead of {_fmt_bytes(moved)} for "
                f"{seqs} independent sequences → {kv['tokens_per_s'] / ar['tokens_per_s']:.2f}× AR")
    cost = b["step_latency_s"] / ar["step_latency_s"]
    q = b["config"].get("tree_nodes", b["config"].get("gamma", 0)) + 1
    what = "verification of" if best == "speculative" else "verifying a tree of"
    how = ("is nearly free there" if bound != "compute" else
           "is paid almost in full here, but the step's fixed costs (launches, host overhead, weight reads) "
           "are shared by more tokens")
    return (head + f"; {what} {q} tokens {how}: a step of {best} ({_cfg_text(b['config'])}) "
            f"costs {cost:.2f}× an AR step (draft included) and yields {b['tokens_per_step']:.2f} tokens per sequence "
            f"→ {_r(b['speedup_vs_ar'])}× AR")


def draft_sentence(cands: dict, best: str) -> str:
    """"; the draft binds …" when the best speculative or tree candidate (or, when plain decoding wins,
    the best of them) spends more than half of its step in draft passes."""
    from costmodel.analysis.plan import DRAFT_BOTTLENECK_SHARE
    name = best if best in ("speculative", "tree") else max(
        (k for k in ("speculative", "tree") if k in cands), key=lambda k: cands[k].get("ratio_to_best", 0), default=None)
    c = cands.get(name) if name else None
    if not c or not c.get("step_latency_s") or c.get("draft_time_per_step_s", 0.0) <= \
            DRAFT_BOTTLENECK_SHARE * c["step_latency_s"]:
        return ""
    dtp = c["config"].get("draft_tensor_parallel", 1)
    return (f"; the draft binds {name}: its passes take {c['draft_time_per_step_s'] * 1e3:.3g} ms of the "
            f"{c['step_latency_s'] * 1e3:.3g} ms step on {dtp} device(s)"
            + ("" if dtp > 1 else " (draft_tensor_parallel shards a draft model over the target's devices)"))


def _cfg_text(cfg: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if not isinstance(v, list))


# --------------------------------------------------------------------------- one device
def recommend_on(fields: dict, hw, objective: str = "tokens_per_s") -> dict:
    """Recommendation for one device (zoo id, path or Hardware)."""
    fam, notes = variants(fields)
    ev = evaluate_families(fields, hw, objective=objective, fam=fam)
    cands = {}
    for name, e in ev.items():
        i = int(np.ravel(e["index"])[0])
        c = {"strategy": name, "config": e["configs"][i]}
        c.update(_pick(e["results"][i]))
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
                          f"{_fmt_bytes(cands['autoregressive']['peak_device_memory_bytes'])} per device; "
                          f"`costmodel plan` (without n_devices) finds how many devices it needs",
                "candidates": list(cands.values()), "notes": notes}
    best = max(good, key=lambda k: (good[k], -FAMILIES.index(k)))
    ar_pass = evaluate_passes(_record(fam["autoregressive"][0].fields, hw))["decode"].cost
    reason = explain(fields, hw, best, cands, ar_pass) + draft_sentence(cands, best)
    order = sorted(cands, key=lambda k: -cands[k]["ratio_to_best"])
    for c in cands.values():
        c.pop("_goodness")
    return {"recommended": best, "hardware": hw_label, "objective": objective, "reason": reason,
            "candidates": [cands[k] for k in order], "notes": notes}


# --------------------------------------------------------------------------- hardware-blind
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
    n = len(per_hw)
    if n == 0:
        return {"recommended": None, "reason": "nothing fits on any of the devices evaluated",
                "win_probability": {k: 0.0 for k in names}, "worst_case_ratio": {k: 0.0 for k in names},
                "fit_probability": {k: 0.0 for k in names}, "candidates": [], "hardware_evaluated": 0,
                "hardware_skipped": skipped, "notes": notes, "objective": objective}
    prob = {k: wins[k] / n for k in names}
    fitp = {k: sum(p["fits"][k] for p in per_hw) / n for k in names}
    worst, worst_hw, nofit = {}, {}, {}
    for k in names:
        runs = [p for p in per_hw if p["fits"][k]]
        nofit[k] = [p["hardware"] for p in per_hw if not p["fits"][k]]
        if runs:
            w = min(runs, key=lambda p: p["ratios"][k])
            worst[k], worst_hw[k] = w["ratios"][k], w["hardware"]
        else:
            worst[k], worst_hw[k] = 0.0, None
    mean_ratio = {k: float(np.mean([p["ratios"][k] for p in per_hw])) for k in names}
    eligible = [k for k in names if fitp[k] >= FIT_SHARE * max(fitp.values())] or names
    rec = max(eligible, key=lambda k: (worst[k], prob[k]))
    likely = max(names, key=lambda k: prob[k])
    bounds = {}
    for p in per_hw:
        bounds[p["ar_bound"]] = bounds.get(p["ar_bound"], 0) + 1
    regime = ", ".join(f"{b}-bound on {k}" for b, k in sorted(bounds.items(), key=lambda x: -x[1]))
    if worst[rec] >= 1.0 - 1e-9:
        reason = f"{rec} is the best on all {n - len(nofit[rec])} devices where it fits"
    else:
        reason = (f"over {n} devices, {rec} is never worse than {_r(worst[rec])}× the best "
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
    cands = [{"strategy": k, "win_probability": prob[k], "worst_case_ratio": worst[k],
              "worst_case_hardware": worst_hw[k], "mean_ratio_to_best": mean_ratio[k], "fit_probability": fitp[k],
              "does_not_fit_on": nofit[k]}
             for k in sorted(names, key=lambda k: (k != rec, -worst[k], -prob[k]))]
    return {"recommended": rec, "reason": reason, "objective": objective, "win_probability": prob,
            "worst_case_ratio": worst, "fit_probability": fitp, "candidates": cands, "hardware_evaluated": n,
            "hardware_skipped": skipped, "per_hardware": per_hw, "notes": notes}


# --------------------------------------------------------------------------- entry point
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
        if _clean(fields).get(req) is None:
            raise InputError("missing required field", field=req,
                             allowed="model, batch_size and prompt_len (hardware optional: without it the "
                                     "recommendation is hardware-blind)")
    hw = _clean(fields).get("hardware")
    if hw is not None and envelope:
        raise InputError("give either hardware or an envelope, not both", field="hardware")
    if hw is not None:
        parse_record(dict(_clean(fields), strategy="autoregressive"), allow_meta=True)   # validate early
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


def _r(x: float) -> str:
    """A ratio: two decimals, three when two would round a small loss or gain to 1.00."""
    return f"{x:.3f}" if 0.995 <= x < 1.005 and x != 1.0 else f"{x:.2f}"
