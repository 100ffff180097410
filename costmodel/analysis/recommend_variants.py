"""Recommendation candidates: the variants of each strategy family for a record, and their evaluation.

A *family* is a strategy tuned for the record (``costmodel.analysis.recommend`` lists the
families and how each is tuned); a *variant* is one concrete configuration of it (a draft, a γ or
a tree budget), possibly carrying a γ array evaluated in one vectorised pass. ``evaluate_families``
keeps, per family and per grid point, the variant with the best objective among those that fit.
The hardware-blind mode, the reasons and the entry point build on this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.errors import InputError
from costmodel.engine.evaluate import evaluate_arrays
from costmodel.inputs.hardware import Hardware
from costmodel.inputs.model import load_model
from costmodel.inputs.fields import DRAFT_KINDS
from costmodel.inputs.record import parse_record

DEFAULT_ALPHA = 0.7
GAMMAS = tuple(range(1, 9))
TREE_BUDGETS = (2, 4, 8, 16, 32, 64)
TREE_DRAFTS = ("eagle",)
FAMILIES = ("autoregressive", "speculative", "tree", "shared_prefix")
#: objective -> +1 when higher is better, -1 when lower is better
OBJECTIVES = {"tokens_per_s": 1, "tokens_per_s_per_seq": 1, "time_per_output_token_s": -1,
              "e2e_latency_s": -1, "step_latency_s": -1}
STRATEGY_FIELDS = ("strategy", "draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens", "tree_width",
                   "tree_depth", "tree_nodes", "tree_shape", "tree_parents", "rank_acceptance",
                   "draft_kv_budget", "batch_sync", "draft_placement", "draft_schedule", "draft_tensor_parallel",
                   "acceptance_by_position", "draft_vocab_size")
FIGURE_KEYS = ("tokens_per_s", "tokens_per_s_per_seq", "step_latency_s", "tokens_per_step",
               "time_per_output_token_s", "ttft_s", "e2e_latency_s", "speedup_vs_ar", "bound",
               "peak_device_memory_bytes", "fits", "arithmetic_intensity", "hbm_bytes_per_step",
               "flops_per_step", "draft_time_per_step_s")


@dataclass
class Variant:
    """One concrete configuration of a family: record fields plus optional numeric arrays."""

    family: str
    fields: dict
    arrays: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)     # what distinguishes it, for the output


def clean_fields(fields: dict) -> dict:
    """``fields`` without the keys whose value is None or a blank string."""
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
    f = clean_fields(dict(fields))
    notes = []
    alpha, note = acceptance_of(f)
    if note:
        notes.append(note)
    base = {k: v for k, v in f.items() if k not in STRATEGY_FIELDS}
    fam: dict = {}
    indep = _independent_fields(f, base, fam)
    fam["autoregressive"] = [Variant("autoregressive", dict(indep, strategy="autoregressive"))]
    acc = {"acceptance_rate": alpha}
    for k in ("batch_sync", "draft_placement", "draft_schedule", "draft_kv_budget"):
        if k in f:
            acc[k] = f[k]
    user_draft = str(f.get("draft_model", "")).strip().lower() or None
    draft = _chain_draft(f, user_draft, notes)
    fam["speculative"] = _speculative_variants(f, dict(indep, strategy="speculative", draft_model=draft, **acc),
                                               draft, gamma_axis)
    fam["tree"] = _tree_variants(f, indep, acc, user_draft)
    if not user_draft:
        notes.append(f"the chain draft ({draft}) and the tree's EAGLE head are compared at the same acceptance "
                     f"α = {alpha:.2f}; give draft_model= to compare another drafter")
    return fam, notes


def _independent_fields(f: dict, base: dict, fam: dict) -> dict:
    """The record the non-sharing families decode: with ``n_branches`` > 1, the B·n sequences as an
    independent batch (and the ``shared_prefix`` family added to ``fam``); else ``base`` as is."""
    n_br = int(float(f.get("n_branches") or 1))
    indep = dict(base)
    if n_br > 1:
        indep["batch_size"] = int(float(f["batch_size"])) * n_br if "batch_size" in f else None
        indep.pop("n_branches", None)
        indep.pop("shared_prefix_len", None)
        indep = clean_fields(indep)
        fam["shared_prefix"] = [Variant("shared_prefix", dict(base, strategy="shared_prefix"),
                                        config={"n_branches": n_br})]
    return indep


def _chain_draft(f: dict, user_draft, notes: list):
    """The speculative family's draft: the record's (unless Medusa heads), else the smallest compatible
    zoo model, else prompt lookup (``none``, with a note)."""
    if user_draft and user_draft != "medusa":
        return f["draft_model"]
    ds = compatible_drafts(f["model"]) if "model" in f else []
    if not ds:
        notes.append("no zoo model shares the target's vocabulary: speculative uses prompt lookup "
                     "(draft_model=none)")
    return ds[0] if ds else "none"


def _speculative_variants(f: dict, spec: dict, draft, gamma_axis: int) -> list:
    """One variant per draft TP degree: the record's γ, or every γ of ``GAMMAS`` (up to the length of
    ``acceptance_by_position``) as one array on a new leading axis."""
    gammas = GAMMAS
    if "acceptance_by_position" in f:
        spec.pop("acceptance_rate")
        spec["acceptance_by_position"] = f["acceptance_by_position"]
        gammas = tuple(range(1, min(max(GAMMAS), len(str(f["acceptance_by_position"]).split(","))
                                    if isinstance(f["acceptance_by_position"], str)
                                    else len(f["acceptance_by_position"])) + 1))
    if "draft_vocab_size" in f and str(draft).lower() == "eagle3":
        spec["draft_vocab_size"] = f["draft_vocab_size"]
    out = []
    for dtp in _draft_tp_choices(f, draft):
        sd = dict(spec, draft_tensor_parallel=dtp) if dtp != 1 else dict(spec)
        cfg = {"draft_model": draft, **({"draft_tensor_parallel": dtp} if dtp != 1 else {})}
        if "gamma" in f:
            out.append(Variant("speculative", dict(sd, gamma=f["gamma"]),
                               config=dict(cfg, gamma=int(float(f["gamma"])))))
        else:
            g = np.asarray(gammas, dtype=float).reshape((-1,) + (1,) * gamma_axis)
            out.append(Variant("speculative", dict(sd, gamma=min(4, max(gammas))), {"gamma": g},
                               config=dict(cfg, gamma=list(gammas))))
    return out


def _tree_variants(f: dict, indep: dict, acc: dict, user_draft) -> list:
    """Tree variants per drafter: the record's shape if it fixes one, else one per node budget of
    ``TREE_BUDGETS`` below the record's ``tree_nodes`` (if any) plus that cap."""
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
    return tv


def record_on(fields: dict, hw):
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
            rec = record_on(v.fields, hw)
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


def pick_figures(res: dict, i=None):
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
