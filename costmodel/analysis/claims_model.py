"""The model's side of a claim: predictions for any metric of the claim's record (``Predictor``),
the physical floors of its configuration (``hard_limits``: datasheet peaks, the engine's weights and
KV) and the verdict of one figure against them (``bound_violation``) or the error band
(``band_verdict``). Formulas: :mod:`costmodel.analysis.claims`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.errors import InputError, shown
from costmodel.inputs.record import parse_record

from costmodel.analysis.claims_load import Claimed, ErrorBand, higher_is_better

DERIVED = {"breakeven_acceptance_rate", "attention_time_fraction", "attention_time_s", "recommended_strategy"}
CLAIM_KEYS = ("id", "text", "metric", "value", "values", "relative_to", "compare", "not_checkable", "notes",
              "source", "base", "unit", "measured", "reliability", "source_locator")
STRATEGY_FIELDS = ("draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens", "tree_width", "tree_depth",
                   "tree_nodes", "tree_shape", "tree_parents", "rank_acceptance", "draft_kv_budget", "batch_sync",
                   "draft_placement", "draft_schedule", "n_branches", "shared_prefix_len")

# --------------------------------------------------------------------------- the model's side
def record_fields(c: dict) -> dict:
    return {k: v for k, v in c.items() if k not in CLAIM_KEYS and not k.startswith("_")}


def _override(fields: dict, over: dict) -> dict:
    f = dict(fields)
    if "strategy" in over and over["strategy"] != f.get("strategy"):
        for k in STRATEGY_FIELDS:
            if k not in over:
                f.pop(k, None)
    f.update(over)
    return f


def _hw_metric(rec, metric: str) -> float:
    from costmodel.inputs.hardware import load_hardware
    hw = load_hardware(rec.hardware, rec.power_mode)
    import dataclasses

    from costmodel.inputs.hardware import DTYPES
    key = metric.split(".", 1)[1]
    allowed = ("hardware.<a numeric field of the hardware spec, e.g. bandwidth_bytes_per_s, capacity_bytes, "
               "usable_bytes, l2_bytes>, hardware.matrix_flops_per_s.<dtype>")
    if key.startswith("matrix_flops_per_s"):
        dt = key.split(".", 1)[1] if "." in key else "fp16"
        if dt not in DTYPES:
            raise InputError(f"unknown dtype in {shown(metric)}", field="metric", allowed=", ".join(DTYPES))
        return hw.matrix_peak(dt)
    numeric = {f.name for f in dataclasses.fields(hw)
               if isinstance(getattr(hw, f.name), (int, float)) and not isinstance(getattr(hw, f.name), bool)}
    if key not in numeric:          # only the spec's numeric fields: never an attribute such as __class__
        raise InputError(f"unknown hardware metric {shown(metric)}", field="metric", allowed=allowed)
    return float(getattr(hw, key))


def _attention_fraction(out: dict) -> float:
    """Share of attention in attention + FFN operator time of one step (whole step, all passes)."""
    att = sum(o["time_s"] for o in out["operators"] if o["name"] == "attention")
    ffn = sum(o["time_s"] for o in out["operators"] if o["name"] in ("ffn", "moe_ffn", "ffn_activation", "router"))
    return att / (att + ffn) if att + ffn > 0 else float("nan")


def _breakeven_alpha(fields: dict) -> float:
    """Smallest α whose speedup over AR reaches 1 (bisection on α; speedup rises with α)."""
    from costmodel.engine.evaluate import evaluate
    f = {k: v for k, v in fields.items() if k not in ("acceptance_rate", "mean_accepted_tokens")}

    def s(a):
        return evaluate(dict(f, acceptance_rate=a))["speedup_vs_ar"]
    lo, hi = 0.0, 0.99
    if s(lo) >= 1.0:
        return 0.0
    if s(hi) < 1.0:
        return float("inf")
    for _ in range(20):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if s(mid) >= 1.0 else (mid, hi)
    return 0.5 * (lo + hi)


class Predictor:
    """Evaluates one claim's record once and answers metric queries."""

    def __init__(self, fields: dict, rec, band: ErrorBand):
        from costmodel.engine.evaluate import evaluate
        self.fields, self.rec, self.band = fields, rec, band
        self.out = evaluate(rec, details=True)
        self._cache = {}

    def value(self, metric: str, relative_to=None, compare="ratio"):
        if relative_to:
            a = self.value(metric)
            other = Predictor(_override(self.fields, relative_to), parse_claim_record(_override(self.fields, relative_to),
                                                                           "relative_to"), self.band)
            b = other.value(metric)
            if isinstance(a, str) or isinstance(b, str):
                raise InputError("relative_to needs a numeric metric", field="metric", value=metric)
            return (a - b) if compare == "difference" else (a / b if b else float("inf")), other
        if metric in self._cache:
            return self._cache[metric]
        if "/" in metric:
            a, b = metric.split("/", 1)
            den = float(self.value(b.strip()))
            v = float(self.value(a.strip())) / den if den else float("inf")
        elif "-" in metric:
            a, b = metric.split("-", 1)
            v = float(self.value(a.strip())) - float(self.value(b.strip()))
        elif "+" in metric:
            v = sum(float(self.value(m.strip())) for m in metric.split("+"))
        elif metric == "attention_time_s":
            v = sum(o["time_s"] for o in self.out["operators"] if o["name"] == "attention")
        elif metric.startswith("hardware."):
            v = _hw_metric(self.rec, metric)
        elif metric == "attention_time_fraction":
            v = _attention_fraction(self.out)
        elif metric == "breakeven_acceptance_rate":
            if self.rec.strategy not in ("speculative", "tree"):
                raise InputError("breakeven_acceptance_rate needs strategy speculative or tree", field="strategy")
            v = _breakeven_alpha(self.fields)
        elif metric == "recommended_strategy":
            v = recommend_cached(self.fields)["recommended"]
        elif metric in self.out:
            v = self.out[metric]
        else:
            allowed = sorted(k for k, x in self.out.items() if isinstance(x, (int, float, bool, str)))
            raise InputError(f"unknown metric {shown(metric)}", field="metric",
                             allowed=", ".join(allowed + sorted(DERIVED)) + ", hardware.<field>, or a+b")
        self._cache[metric] = v
        return v


_REC_CACHE: dict = {}


def clear_cache() -> None:
    """Forget the memoised recommendations (one check() run shares them)."""
    _REC_CACHE.clear()


def recommend_cached(fields: dict) -> dict:
    """recommend(fields), memoised for one check() run (several claims share a workload)."""
    from costmodel.analysis.recommend import recommend
    key = repr(sorted((str(k), repr(v)) for k, v in fields.items()))
    if key not in _REC_CACHE:
        _REC_CACHE[key] = recommend(dict(fields))
    return _REC_CACHE[key]


def parse_claim_record(fields: dict, src: str):
    return parse_record(fields, source=src, allow_meta=True)


# --------------------------------------------------------------------------- hard bounds
@dataclass
class Limits:
    fits_floor: bool
    mem_floor: float
    usable: float
    t_floor: float
    t_floor_basis: str
    tau_b: float
    tau_struct: float
    seqs: float
    tps_ceiling_compute: float
    ttft_floor: float
    gen_len: float


def hard_limits(rec, out: dict) -> Limits:
    """Physical floors of the claim's configuration (module docstring)."""
    from costmodel.engine import memory
    from costmodel.engine.evaluate import build_exec
    ex = build_exec(rec)
    m, hw = ex.model, ex.hw
    seqs = float(out.get("n_sequences", rec.batch_size))
    kv_seqs = float(rec.batch_size) if rec.strategy == "shared_prefix" else seqs
    bw = hw.bandwidth_bytes_per_s
    peak = hw.matrix_peak(ex.compute_dtype)
    n_act = float(m.active_params_per_token)
    w_read = memory.active_weights_bytes_device(ex)
    kv_tok_all_layers = ex.kv_bytes_per_token_layer * m.n_layers          # per device, all pipeline stages
    kv_read = kv_seqs * rec.prompt_len * kv_tok_all_layers
    t_bytes = (w_read + kv_read) / bw
    t_flops = 2.0 * n_act * seqs / (ex.tp * peak)
    t_floor = max(t_bytes, t_flops)
    basis = (f"{(w_read + kv_read) / 1e9:.2f} GB of weights and KV per device at the {bw / 1e9:.0f} GB/s peak"
             if t_bytes >= t_flops else f"{2 * n_act * seqs / 1e12:.2f} TFLOP at the {peak / 1e12:.0f} TFLOP/s peak")
    # memory that must be resident on one device
    w_dev = memory.weights_device_bytes(ex)
    if rec.strategy in ("speculative", "tree") and rec.draft_placement == "same_device":
        w_dev += float(out.get("memory_draft_weights_bytes", 0.0))
    mem_floor = w_dev + kv_seqs * max(rec.prompt_len, 1) * memory.kv_bytes_per_token_device(ex)
    tau = float(out.get("tokens_per_step", 1.0)) if rec.strategy in ("speculative", "tree") else 1.0
    if rec.strategy == "speculative":
        struct = rec.gamma + 1.0
    elif rec.strategy == "tree":
        struct = float(out.get("tree_depth", rec.tree_depth or 64)) + 1.0
    else:
        struct = 1.0
    n_dev = rec.n_devices
    ttft_floor = max(w_read / bw, 2.0 * n_act * kv_seqs * max(rec.prompt_len, 1) / (ex.tp * peak))
    return Limits(fits_floor=mem_floor <= hw.usable_bytes, mem_floor=mem_floor, usable=hw.usable_bytes,
                  t_floor=t_floor, t_floor_basis=basis, tau_b=tau, tau_struct=struct, seqs=seqs,
                  tps_ceiling_compute=n_dev * peak / (2.0 * n_act), ttft_floor=ttft_floor, gen_len=rec.gen_len)


def _best_end(c: Claimed, higher_better: bool) -> float:
    """The claim's least extreme reading, for hard bounds (a range is impossible only if all of it is)."""
    if c.kind in ("point",):
        return c.lo
    if c.kind == "range":
        return c.lo if higher_better else c.hi
    if c.kind in ("gt", "ge"):
        return c.lo if higher_better else -math.inf
    if c.kind in ("lt", "le"):
        return c.hi if not higher_better else math.inf
    return float("nan")


def fmt_figure(x: float, unit: str = "") -> str:
    if unit == "B":
        return f"{x / 1e9:.3g} GB"
    if unit == "s":
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g}"


def unit_of(metric: str) -> str:
    if "/" in metric:
        return ""
    metric = metric.split("-")[0].split("+")[0]
    if metric.endswith("_bytes") or "bytes" in metric.split("+")[0]:
        return "B"
    if metric.endswith("_s") and not metric.endswith("per_s"):
        return "s"
    return ""


def bound_violation(metric: str, c: Claimed, lim: Limits, relative=False) -> str | None:
    """Reason text naming every hard bound the claimed figure breaks, else None."""
    found = bound_violations(metric, c, lim, relative)
    return "; ".join(found) if found else None


def bound_violations(metric: str, c: Claimed, lim: Limits, relative=False) -> list:
    """Every hard bound (module docstring of costmodel.analysis.claims) the claimed figure breaks, as reason
    texts."""
    if relative or c.kind in ("bool", "name"):
        return []
    x = _best_end(c, higher_is_better(metric))
    if not math.isfinite(x):
        return []
    return list(_violations(metric, x, lim))


def _violations(metric: str, x: float, lim: Limits):
    """Yields the reason text of each bound that ``x`` (the claim's least extreme reading) breaks."""
    tf, tau = lim.t_floor, lim.tau_b
    floor_txt = f"the floor of {fmt_figure(tf, 's')} per step ({lim.t_floor_basis})"
    if metric == "step_latency_s" and x < tf:
        yield f"a step of {fmt_figure(x, 's')} beats {floor_txt}"
    if metric == "time_per_output_token_s" and x < tf / tau:
        yield f"{fmt_figure(x, 's')} per token beats {floor_txt} ÷ τ = {tau:.2f}"
    if metric == "tokens_per_s_per_seq" and x > tau / tf:
        yield (f"{x:.3g} tokens/s per sequence exceeds τ / floor = {tau:.2f} / {fmt_figure(tf, 's')} = "
               f"{tau / tf:.3g} ({lim.t_floor_basis})")
    if metric == "tokens_per_s":
        cap_bw = lim.seqs * tau / tf
        if x > lim.tps_ceiling_compute:
            yield (f"{x:.3g} tokens/s exceeds the compute ceiling of {lim.tps_ceiling_compute:.3g} "
                   f"(every token costs at least one target forward pass)")
        if x > cap_bw:
            yield (f"{x:.3g} tokens/s exceeds sequences × τ / floor = {lim.seqs:.0f} × {tau:.2f} / {fmt_figure(tf, 's')} "
                   f"= {cap_bw:.3g} ({lim.t_floor_basis})")
    if metric == "speedup_vs_ar" and x > tau * (1 + 1e-9) and tau >= 1:
        yield f"a speedup of {x:.3g}× needs more than the τ = {tau:.2f} tokens per step the claim's acceptance gives"
    if metric in ("tokens_per_step", "mean_accepted_tokens") and x > lim.tau_struct + 1e-9:
        yield f"{x:.3g} tokens per step exceeds the structural maximum {lim.tau_struct:.0f} (γ+1 / depth+1)"
    if metric == "ttft_s" and x < lim.ttft_floor:
        yield f"a time to first token of {fmt_figure(x, 's')} beats the prefill floor of {fmt_figure(lim.ttft_floor, 's')}"
    if metric == "e2e_latency_s" and x < (lim.gen_len - 1) / tau * tf:
        yield (f"{fmt_figure(x, 's')} end to end beats (gen_len − 1)/τ × floor = "
               f"{fmt_figure((lim.gen_len - 1) / tau * tf, 's')}")
    if metric == "peak_device_memory_bytes" and x < lim.mem_floor:
        yield (f"a peak of {fmt_figure(x, 'B')} is below the {fmt_figure(lim.mem_floor, 'B')} of weights and prompt KV that must "
               f"be resident")


def band_verdict(metric: str, c: Claimed, pred, band: float, basis: str, relative: bool = False) -> tuple[str, str]:
    """consistent / optimistic / pessimistic for a numeric figure (``relative``: a ratio, no unit)."""
    p = float(pred)
    unit = "" if relative else unit_of(metric)
    hb = higher_is_better(metric)
    if c.kind in ("point", "range"):
        lo, hi = c.lo, c.hi
        target = lo if p < lo else hi if p > hi else p
        ref = abs(target) if target else abs(p) or 1.0
        dev = abs(p - target) / ref
        shown = fmt_figure(c.lo, unit) if c.kind == "point" else f"{fmt_figure(lo, unit)}–{fmt_figure(hi, unit)}"
        where = ("inside the claimed range" if c.kind == "range" and lo <= p <= hi else
                 f"{abs(p - target) / ref:.0%} {'above' if p > target else 'below'} the claim" if p != target
                 else "the same")
        if dev <= band:
            return "consistent", (f"claims {shown}, the model predicts {fmt_figure(p, unit)} ({where}; within the "
                                  f"±{band:.0%} band, {basis})")
        claim_higher = target > p
        better = claim_higher == hb
        return ("optimistic" if better else "pessimistic",
                f"claims {shown}, the model predicts {fmt_figure(p, unit)} ({where}; band ±{band:.0%}, {basis})")
    # inequalities: consistent if the prediction (widened by the band) satisfies them
    x = c.lo
    ok = {"lt": p < x * (1 + band), "le": p <= x * (1 + band), "gt": p > x * (1 - band), "ge": p >= x * (1 - band)}
    sym = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥"}[c.kind]
    if ok[c.kind]:
        return "consistent", f"claims {sym} {fmt_figure(x, unit)}; the model predicts {fmt_figure(p, unit)}"
    claim_higher = c.kind in ("gt", "ge")
    better = claim_higher == hb
    return ("optimistic" if better else "pessimistic",
            f"claims {sym} {fmt_figure(x, unit)}, the model predicts {fmt_figure(p, unit)} (band ±{band:.0%}, {basis})")
