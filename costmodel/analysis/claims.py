"""Claim checking: ``check(claims)`` -> a verdict per claim (DESIGN §4–§5; user guide: docs/decisions.md).

A claim is a record plus ``id``, ``text`` and either ``metric`` + ``value`` or ``values`` (a mapping
metric -> value, or a list of ``{metric, value, text}``). Values: a number, a ``[low, high]`` range,
an inequality string (``"< 1"``, ``">= 2.5"``), ``true``/``false`` (``fits``) or a name (``bound``,
``recommended_strategy``). Optional: ``relative_to`` (record overrides: the figure is the metric's
ratio to — or with ``compare: difference`` its difference from — the same metric of the overridden
record), ``not_checkable`` (why the model cannot express the claim), ``notes``.

Metrics: any key ``evaluate(record, details=True)`` returns, plus ``hardware.<field>`` (a spec
figure), ``attention_time_s`` (attention operators of one step), ``attention_time_fraction``
(attention ÷ (attention + FFN) operator time), ``breakeven_acceptance_rate`` (the α at which the
speedup over AR reaches 1), ``recommended_strategy`` (:func:`costmodel.analysis.recommend.recommend`; hardware-
blind without ``hardware``), and two metrics joined by ``+``, ``-`` or ``/``.

Verdict of one figure, from most to least severe:

* ``impossible``   — breaks a hard bound (below):
    - does not fit: weights on the device + the prompt's KV cache > usable memory;
    - beats the HBM floor  T_step ≥ T_floor = max((W_read + KV_read) / BW_peak, 2·N_active·S / (tp·F_peak)),
      W_read = active weights per device, KV_read = S·P·KV bytes/token (S sequences, P prompt tokens),
      BW_peak and F_peak datasheet peaks (not the achievable ones) → step_latency ≥ T_floor,
      tokens/s per sequence ≤ τ_b / T_floor, time per output token ≥ T_floor / τ_b, aggregate
      tokens/s ≤ S·τ_b / T_floor, TTFT ≥ prefill floor, e2e ≥ (G−1)/τ_b·T_floor;
    - beats the compute ceiling: aggregate tokens/s ≤ n_devices·F_peak / (2·N_active) (every output
      token costs at least one target forward pass);
    - a speedup over AR above τ_b (a verification step never costs less than an AR step);
    - τ above γ+1 for a chain (depth+1 for a tree);
    - peak memory below the weights + prompt KV that must be resident.
  τ_b is the tokens per step the claim's own acceptance gives (1 for AR and shared-prefix).
* ``inconsistent`` — the claim's figures contradict each other (tolerance ``IDENTITY_TOLERANCE``):
  step latency × tokens/s per sequence = tokens per step (the claimed τ or the one its acceptance
  gives, and never below 1); TPOT × tokens/s per sequence = 1; tokens/s = sequences × tokens/s per
  sequence; draft time + verify time = step latency; speedup ≤ tokens per step; peak memory ≥ the
  claimed parts; α and τ that disagree; one metric given two values; a stated ``bound`` other than the
  binding resource of the claim's configuration.
* ``optimistic`` / ``pessimistic`` — better / worse than predicted by more than the error band
  (|claimed − predicted| / |claimed| > band; "better" = higher throughput, speedup or tokens per step,
  lower latency, memory, bytes or FLOPs). A ratio of two records' throughput or latency
  (``relative_to``) and a ``recommended_strategy`` claim use the band of ``speedup_vs_ar``.
* ``consistent``   — within the band. The band is the p90 absolute relative error of validation for
  that metric when it has ≥ 5 rows, else the overall p90 (``validation/error_band.yaml``).

A claim takes its most severe figure's verdict (impossible > inconsistent > optimistic/pessimistic >
consistent); ``not_checkable`` claims carry their note as the reason.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodel.errors import InputError
from costmodel.inputs.record import STRATEGIES, parse_record

SEVERITY = {"not_checkable": 0, "consistent": 1, "optimistic": 2, "pessimistic": 2, "inconsistent": 3,
            "impossible": 4}
VERDICTS = tuple(SEVERITY)
#: tolerance of the arithmetic identities between a claim's own figures (rounded, "about" figures)
IDENTITY_TOLERANCE = 0.15
HIGHER_BETTER = {"tokens_per_s", "tokens_per_s_per_seq", "tokens_per_step", "speedup_vs_ar",
                 "arithmetic_intensity", "hardware.bandwidth_bytes_per_s", "hardware.capacity_bytes",
                 "hardware.usable_bytes", "hardware.l2_bytes", "hardware.matrix_flops_per_s.fp16",
                 "mean_accepted_tokens", "usable_memory_bytes"}
CATEGORICAL = {"bound", "recommended_strategy"}
#: throughput and latency metrics: their ratio between two records is judged with the speedup band
RATE_METRICS = {"tokens_per_s", "tokens_per_s_per_seq", "step_latency_s", "time_per_output_token_s",
                "e2e_latency_s", "ttft_s"}
DERIVED = {"breakeven_acceptance_rate", "attention_time_fraction", "attention_time_s", "recommended_strategy"}
CLAIM_KEYS = ("id", "text", "metric", "value", "values", "relative_to", "compare", "not_checkable", "notes",
              "source", "base", "unit", "measured", "reliability", "source_locator")
STRATEGY_FIELDS = ("draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens", "tree_width", "tree_depth",
                   "tree_nodes", "tree_shape", "tree_parents", "rank_acceptance", "draft_kv_budget", "batch_sync",
                   "draft_placement", "draft_schedule", "n_branches", "shared_prefix_len")
PATH_FIELDS = ("model", "hardware", "runtime", "draft_model")


# --------------------------------------------------------------------------- error band
@dataclass(frozen=True)
class ErrorBand:
    """Validation error band: the p90 |relative error| of the metric in the claim's regime (batch-1
    latency or batched throughput: ``regime``) when that has ≥ 5 rows, else of the metric when it has
    ≥ 5 rows, else the overall p90."""

    overall: float
    by_metric: dict
    source: str
    by_metric_regime: dict = None

    def for_metric(self, metric: str, batch_size=None) -> tuple[float, str]:
        if batch_size is not None and self.by_metric_regime:
            reg = regime(batch_size)
            m = (self.by_metric_regime.get(metric) or {}).get(reg)
            if m and m.get("n", 0) >= 5 and m.get("p90_abs_rel_error") is not None:
                return float(m["p90_abs_rel_error"]), f"p90 of {m['n']} validation rows for {metric}, {reg}"
        m = self.by_metric.get(metric)
        if m and m.get("n", 0) >= 5 and m.get("p90_abs_rel_error") is not None:
            return float(m["p90_abs_rel_error"]), f"p90 of {m['n']} validation rows for {metric}"
        return self.overall, "overall validation p90"


def regime(batch_size) -> str:
    """``batch1_latency`` for one sequence, ``batched_throughput`` for more: the two regimes whose
    errors differ (host and launch costs vs bandwidth and scheduling at large batch)."""
    return "batch1_latency" if float(batch_size) <= 1 else "batched_throughput"


def default_band_path() -> Path:
    env = os.environ.get("COSTMODEL_ERROR_BAND")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "validation" / "error_band.yaml"


def load_error_band(band=None) -> ErrorBand:
    """``band``: an ErrorBand, a mapping shaped like error_band.yaml, a path, or None (the project's
    ``validation/error_band.yaml``, or $COSTMODEL_ERROR_BAND)."""
    if isinstance(band, ErrorBand):
        return band
    src = "mapping"
    if band is None or isinstance(band, (str, os.PathLike)):
        path = Path(band) if band is not None else default_band_path()
        if not path.is_file():
            raise InputError("no validation error band found: claims are judged against the model's measured "
                             "error, so run `costmodel validate --report` first (it writes "
                             "validation/error_band.yaml), or pass one with --band FILE", source=str(path))
        from costmodel.inputs.specs import load_yaml
        band, src = load_yaml(path), str(path)
    if not isinstance(band, dict) or not isinstance(band.get("overall"), dict):
        raise InputError("an error band needs 'overall: {n, median_abs_rel_error, p90_abs_rel_error}'",
                         source=src, field="overall")
    try:
        overall = float(band["overall"]["p90_abs_rel_error"])
    except (KeyError, TypeError, ValueError):
        raise InputError("must be a number", source=src, field="overall.p90_abs_rel_error") from None
    if not (overall >= 0 and math.isfinite(overall)):
        raise InputError(f"must be a non-negative number, got {overall}", source=src,
                         field="overall.p90_abs_rel_error")
    by = band.get("by_metric") or {}
    if not isinstance(by, dict):
        raise InputError("must be a mapping metric -> {n, p90_abs_rel_error}", source=src, field="by_metric")
    byr = band.get("by_metric_regime") or {}
    if not isinstance(byr, dict) or not all(isinstance(v, dict) for v in byr.values()):
        raise InputError("must be a mapping metric -> regime -> {n, p90_abs_rel_error}", source=src,
                         field="by_metric_regime")
    return ErrorBand(overall=overall, by_metric={str(k): dict(v or {}) for k, v in by.items()}, source=src,
                     by_metric_regime={str(k): {str(r): dict(x or {}) for r, x in v.items()} for k, v in byr.items()})


# --------------------------------------------------------------------------- loading
def load_claims(path) -> list:
    """Claims YAML: ``claims:`` list; optional ``bases: {name: {record fields}}`` used by a claim's
    ``base: name``. Relative model/hardware/runtime paths resolve against the file's folder."""
    from costmodel.inputs.specs import load_yaml
    data = load_yaml(path)
    src = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise InputError("a claims file needs a top-level 'claims:' list", source=src, field="claims")
    bases = data.get("bases") or {}
    if not isinstance(bases, dict):
        raise InputError("must be a mapping of name: {record fields}", source=src, field="bases")
    folder = Path(path).resolve().parent
    out = []
    for i, c in enumerate(data["claims"]):
        if not isinstance(c, dict):
            raise InputError("each claim must be a mapping", source=src, field=f"claims[{i}]")
        c = dict(c)
        if "base" in c:
            b = bases.get(c["base"])
            if b is None:
                raise InputError(f"unknown base {c['base']!r}", source=src, field=f"claims[{i}].base",
                                 allowed=", ".join(bases) or "(no bases defined)")
            c = {**b, **c}
        for k in PATH_FIELDS:
            v = c.get(k)
            if isinstance(v, str) and ("/" in v or v.endswith((".yaml", ".yml", ".json"))) and \
                    not os.path.isabs(v) and (folder / v).is_file():
                c[k] = str(folder / v)
        c.setdefault("_source", f"{src}: claims[{i}]")
        out.append(c)
    return out


def _figures(c: dict, src: str) -> list:
    """[(metric, value, text)] of a claim."""
    figs = []
    if "metric" in c:
        if "value" not in c:
            raise InputError("a claim with 'metric' needs a 'value'", source=src, field="value")
        figs.append((str(c["metric"]), c["value"], None))
    vals = c.get("values")
    if isinstance(vals, dict):
        figs.extend((str(k), v, None) for k, v in vals.items())
    elif isinstance(vals, list):
        for j, v in enumerate(vals):
            if not isinstance(v, dict) or "metric" not in v or "value" not in v:
                raise InputError("each entry needs metric and value", source=src, field=f"values[{j}]")
            figs.append((str(v["metric"]), v["value"], v.get("text")))
    elif vals is not None:
        raise InputError("must be a mapping metric: value or a list of {metric, value}", source=src,
                         field="values")
    if not figs and "not_checkable" not in c:
        raise InputError("a claim needs metric + value, or values", source=src, field="metric")
    return figs


# --------------------------------------------------------------------------- values
@dataclass(frozen=True)
class Claimed:
    kind: str            # 'point', 'range', 'lt', 'le', 'gt', 'ge', 'bool', 'name'
    lo: float = float("nan")
    hi: float = float("nan")
    name: str = ""
    raw: object = None


def parse_value(v, src: str, metric: str) -> Claimed:
    if isinstance(v, bool):
        return Claimed("bool", name=str(v).lower(), raw=v)
    if isinstance(v, (int, float)):
        return Claimed("point", float(v), float(v), raw=v)
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        lo, hi = sorted(float(x) for x in v)
        return Claimed("range", lo, hi, raw=list(v))
    if isinstance(v, str):
        s = v.strip()
        for op, kind in (("<=", "le"), (">=", "ge"), ("<", "lt"), (">", "gt")):
            if s.startswith(op):
                try:
                    x = float(s[len(op):].strip())
                except ValueError:
                    break
                return Claimed(kind, x, x, raw=v)
        try:
            x = float(s)
            return Claimed("point", x, x, raw=v)
        except ValueError:
            pass
        if s.lower() in ("true", "false"):
            return Claimed("bool", name=s.lower(), raw=v)
        return Claimed("name", name=s.lower().replace("-", "_"), raw=v)
    raise InputError(f"unsupported claim value {v!r}", source=src, field=metric,
                     allowed="a number, [low, high], '< x' / '>= x', true/false, or a name")


def higher_is_better(metric: str) -> bool:
    """Direction of 'better' (a + b and a / b follow a)."""
    return metric in HIGHER_BETTER or metric.split("+")[0].split("/")[0].split("-")[0].strip() in HIGHER_BETTER


# --------------------------------------------------------------------------- the model's side
def _record_fields(c: dict) -> dict:
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
    key = metric.split(".", 1)[1]
    if key.startswith("matrix_flops_per_s"):
        return hw.matrix_peak(key.split(".", 1)[1] if "." in key else "fp16")
    if not hasattr(hw, key):
        raise InputError(f"unknown hardware metric {metric!r}", field="metric",
                         allowed="hardware.bandwidth_bytes_per_s, hardware.capacity_bytes, hardware.usable_bytes, "
                                 "hardware.l2_bytes, hardware.matrix_flops_per_s.<dtype>")
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
            other = Predictor(_override(self.fields, relative_to), _parse(_override(self.fields, relative_to),
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
            v = _recommend(self.fields)["recommended"]
        elif metric in self.out:
            v = self.out[metric]
        else:
            allowed = sorted(k for k, x in self.out.items() if isinstance(x, (int, float, bool, str)))
            raise InputError(f"unknown metric {metric!r}", field="metric",
                             allowed=", ".join(allowed + sorted(DERIVED)) + ", hardware.<field>, or a+b")
        self._cache[metric] = v
        return v


_REC_CACHE: dict = {}


def _recommend(fields: dict) -> dict:
    """recommend(fields), memoised for one check() run (several claims share a workload)."""
    from costmodel.analysis.recommend import recommend
    key = repr(sorted((str(k), repr(v)) for k, v in fields.items()))
    if key not in _REC_CACHE:
        _REC_CACHE[key] = recommend(dict(fields))
    return _REC_CACHE[key]


def _parse(fields: dict, src: str):
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
    from costmodel.engine.evaluate import build_exec
    ex = build_exec(rec)
    m, hw = ex.model, ex.hw
    seqs = float(out.get("n_sequences", rec.batch_size))
    kv_seqs = float(rec.batch_size) if rec.strategy == "shared_prefix" else seqs
    bw = hw.bandwidth_bytes_per_s
    peak = hw.matrix_peak(ex.compute_dtype)
    n_act = float(m.active_params_per_token)
    w_read = ((n_act - m.lm_head_params) * ex.w_bytes + m.lm_head_params * ex.lm_head_w_bytes) / ex.tp
    kv_tok_all_layers = ex.kv_bytes_per_token_layer * m.n_layers          # per device, all pipeline stages
    kv_read = kv_seqs * rec.prompt_len * kv_tok_all_layers
    t_bytes = (w_read + kv_read) / bw
    t_flops = 2.0 * n_act * seqs / (ex.tp * peak)
    t_floor = max(t_bytes, t_flops)
    basis = (f"{(w_read + kv_read) / 1e9:.2f} GB of weights and KV per device at the {bw / 1e9:.0f} GB/s peak"
             if t_bytes >= t_flops else f"{2 * n_act * seqs / 1e12:.2f} TFLOP at the {peak / 1e12:.0f} TFLOP/s peak")
    # memory that must be resident on one device
    w_dev = ex.weight_bytes_device()
    if rec.strategy in ("speculative", "tree") and rec.draft_placement == "same_device":
        w_dev += float(out.get("memory_draft_weights_bytes", 0.0))
    mem_floor = w_dev + kv_seqs * max(rec.prompt_len, 1) * ex.kv_bytes_per_token_device
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


def _g(x: float, unit: str = "") -> str:
    if unit == "B":
        return f"{x / 1e9:.3g} GB"
    if unit == "s":
        return f"{x * 1e3:.3g} ms"
    return f"{x:.3g}"


def _unit(metric: str) -> str:
    if "/" in metric:
        return ""
    metric = metric.split("-")[0].split("+")[0]
    if metric.endswith("_bytes") or "bytes" in metric.split("+")[0]:
        return "B"
    if metric.endswith("_s") and not metric.endswith("per_s"):
        return "s"
    return ""


def bound_violation(metric: str, c: Claimed, lim: Limits, relative=False) -> str | None:
    """Reason text if the claimed figure breaks a hard bound, else None."""
    if relative or c.kind in ("bool", "name"):
        return None
    hb = higher_is_better(metric)
    x = _best_end(c, hb)
    if not math.isfinite(x):
        return None
    tf, tau = lim.t_floor, lim.tau_b
    floor_txt = f"the floor of {_g(tf, 's')} per step ({lim.t_floor_basis})"
    if metric == "step_latency_s" and x < tf:
        return f"a step of {_g(x, 's')} beats {floor_txt}"
    if metric == "time_per_output_token_s" and x < tf / tau:
        return f"{_g(x, 's')} per token beats {floor_txt} ÷ τ = {tau:.2f}"
    if metric == "tokens_per_s_per_seq" and x > tau / tf:
        return (f"{x:.3g} tokens/s per sequence exceeds τ / floor = {tau:.2f} / {_g(tf, 's')} = "
                f"{tau / tf:.3g} ({lim.t_floor_basis})")
    if metric == "tokens_per_s":
        cap_bw = lim.seqs * tau / tf
        if x > lim.tps_ceiling_compute:
            return (f"{x:.3g} tokens/s exceeds the compute ceiling of {lim.tps_ceiling_compute:.3g} "
                    f"(every token costs at least one target forward pass)")
        if x > cap_bw:
            return (f"{x:.3g} tokens/s exceeds sequences × τ / floor = {lim.seqs:.0f} × {tau:.2f} / {_g(tf, 's')} "
                    f"= {cap_bw:.3g} ({lim.t_floor_basis})")
    if metric == "speedup_vs_ar" and x > tau * (1 + 1e-9) and tau >= 1:
        return f"a speedup of {x:.3g}× needs more than the τ = {tau:.2f} tokens per step the claim's acceptance gives"
    if metric in ("tokens_per_step", "mean_accepted_tokens") and x > lim.tau_struct + 1e-9:
        return f"{x:.3g} tokens per step exceeds the structural maximum {lim.tau_struct:.0f} (γ+1 / depth+1)"
    if metric == "ttft_s" and x < lim.ttft_floor:
        return f"a time to first token of {_g(x, 's')} beats the prefill floor of {_g(lim.ttft_floor, 's')}"
    if metric == "e2e_latency_s" and x < (lim.gen_len - 1) / tau * tf:
        return (f"{_g(x, 's')} end to end beats (gen_len − 1)/τ × floor = "
                f"{_g((lim.gen_len - 1) / tau * tf, 's')}")
    if metric == "peak_device_memory_bytes" and x < lim.mem_floor:
        return (f"a peak of {_g(x, 'B')} is below the {_g(lim.mem_floor, 'B')} of weights and prompt KV that must "
                f"be resident")
    return None


def band_verdict(metric: str, c: Claimed, pred, band: float, basis: str, relative: bool = False) -> tuple[str, str]:
    """consistent / optimistic / pessimistic for a numeric figure (``relative``: a ratio, no unit)."""
    p = float(pred)
    unit = "" if relative else _unit(metric)
    hb = higher_is_better(metric)
    if c.kind in ("point", "range"):
        lo, hi = c.lo, c.hi
        target = lo if p < lo else hi if p > hi else p
        ref = abs(target) if target else abs(p) or 1.0
        dev = abs(p - target) / ref
        shown = _g(c.lo, unit) if c.kind == "point" else f"{_g(lo, unit)}–{_g(hi, unit)}"
        where = ("inside the claimed range" if c.kind == "range" and lo <= p <= hi else
                 f"{abs(p - target) / ref:.0%} {'above' if p > target else 'below'} the claim" if p != target
                 else "the same")
        if dev <= band:
            return "consistent", (f"claims {shown}, the model predicts {_g(p, unit)} ({where}; within the "
                                  f"±{band:.0%} band, {basis})")
        claim_higher = target > p
        better = claim_higher == hb
        return ("optimistic" if better else "pessimistic",
                f"claims {shown}, the model predicts {_g(p, unit)} ({where}; band ±{band:.0%}, {basis})")
    # inequalities: consistent if the prediction (widened by the band) satisfies them
    x = c.lo
    ok = {"lt": p < x * (1 + band), "le": p <= x * (1 + band), "gt": p > x * (1 - band), "ge": p >= x * (1 - band)}
    sym = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥"}[c.kind]
    if ok[c.kind]:
        return "consistent", f"claims {sym} {_g(x, unit)}; the model predicts {_g(p, unit)}"
    claim_higher = c.kind in ("gt", "ge")
    better = claim_higher == hb
    return ("optimistic" if better else "pessimistic",
            f"claims {sym} {_g(x, unit)}, the model predicts {_g(p, unit)} (band ±{band:.0%}, {basis})")


# --------------------------------------------------------------------------- one claim
def _identity_checks(figs: dict, pred: Predictor, lim: Limits, stated_tau_given: bool) -> list:
    """(verdict, metric, reason) for arithmetic contradictions between a claim's own point figures."""
    tol = IDENTITY_TOLERANCE
    out = []

    def pt(k):
        c = figs.get(k)
        return c.lo if c is not None and c.kind == "point" else (0.5 * (c.lo + c.hi) if c is not None and
                                                                 c.kind == "range" else None)

    def off(a, b):
        return abs(a - b) / max(abs(b), 1e-300) > tol

    lat, tps, tpot, agg, tpst = (pt(k) for k in ("step_latency_s", "tokens_per_s_per_seq", "time_per_output_token_s",
                                                  "tokens_per_s", "tokens_per_step"))
    implied = None
    how = ""
    if lat is not None and tps is not None:
        implied, how = lat * tps, f"{_g(lat, 's')} per step × {tps:g} tokens/s per sequence"
    elif lat is not None and tpot is not None:
        implied, how = lat / tpot, f"{_g(lat, 's')} per step ÷ {_g(tpot, 's')} per token"
    if implied is not None:
        if tpst is not None:
            stated, what = tpst, "the claimed tokens per step"
        else:
            stated = lim.tau_b
            what = ("the τ its acceptance gives" if pred.rec.strategy in ("speculative", "tree")
                    else "the one token per step of this strategy")
        if implied < 1.0 - tol:
            out.append(("inconsistent", "tokens_per_step",
                        f"{how} imply {implied:.2f} tokens per step, fewer than the one every step yields"
                        + (f" (its acceptance gives τ = {stated:.2f})" if pred.rec.strategy in ("speculative", "tree")
                           else "")))
        elif off(implied, stated):
            out.append(("inconsistent", "tokens_per_step",
                        f"{how} imply {implied:.2f} tokens per step, but {what} is {stated:.2f}"))
    if tpot is not None and tps is not None and off(tpot * tps, 1.0):
        out.append(("inconsistent", "time_per_output_token_s",
                    f"{_g(tpot, 's')} per token and {tps:g} tokens/s per sequence disagree (product {tpot * tps:.2f}, not 1)"))
    if agg is not None and tps is not None and off(agg / tps, lim.seqs):
        out.append(("inconsistent", "tokens_per_s",
                    f"{agg:g} tokens/s in aggregate is {agg / tps:.2f}× the {tps:g} per sequence, but "
                    f"{lim.seqs:.0f} sequences decode"))
    d, v = pt("draft_time_per_step_s"), pt("verify_time_s")
    if d is not None and v is not None and lat is not None and off(d + v, lat):
        out.append(("inconsistent", "step_latency_s",
                    f"draft {_g(d, 's')} + verify {_g(v, 's')} = {_g(d + v, 's')}, not the claimed {_g(lat, 's')} per step"))
    sp = pt("speedup_vs_ar")
    if sp is not None and tpst is not None and sp > tpst * (1 + tol):
        out.append(("inconsistent", "speedup_vs_ar",
                    f"a {sp:g}× speedup needs more than the claimed {tpst:g} tokens per step"))
    peak = pt("peak_device_memory_bytes")
    parts = [pt(k) for k in figs if k.startswith("memory_") or k in ("kv_cache_bytes", "weights_bytes")]
    parts = [x for x in parts if x is not None]
    if peak is not None and parts and sum(parts) > peak * (1 + tol):
        out.append(("inconsistent", "peak_device_memory_bytes",
                    f"the claimed parts add up to {_g(sum(parts), 'B')}, more than the claimed peak {_g(peak, 'B')}"))
    return out


def check_claim(c: dict, band: ErrorBand) -> dict:
    """Verdict of one claim (mapping); see the module docstring."""
    cid = str(c.get("id", "?"))
    src = c.get("_source", f"claim {cid}")
    base = {"id": cid, "verdict": "not_checkable", "reason": "", "claimed": None, "predicted": None}
    if c.get("text"):
        base["text"] = str(c["text"]).strip()
    if "not_checkable" in c:
        base["reason"] = str(c["not_checkable"]).strip()
        if "metric" in c:
            base["claimed"] = c.get("value")
        return base
    figs_raw = _figures(c, src)
    fields = _record_fields(c)
    figs = []
    seen = {}
    pre = []                 # figure-level verdicts found before evaluation
    for metric, value, text in figs_raw:
        cv = parse_value(value, src, metric)
        if metric in seen and seen[metric].raw != cv.raw:
            pre.append(("inconsistent", metric, f"{metric} is given as both {seen[metric].raw!r} and {cv.raw!r}"))
        seen[metric] = cv
        figs.append((metric, cv, text))
    # acceptance figures in the record itself
    strat = str(fields.get("strategy", "autoregressive")).strip().lower()
    tau, alpha = fields.get("mean_accepted_tokens"), fields.get("acceptance_rate")
    if strat in ("speculative", "spec") and tau is not None:
        g = float(fields.get("gamma", 4))
        if float(tau) > g + 1:
            pre.append(("impossible", "mean_accepted_tokens",
                        f"τ = {float(tau):g} tokens per step from a chain of γ = {g:g} drafts exceeds γ + 1 = {g + 1:g}"))
            fields["mean_accepted_tokens"] = g + 1.0
        elif alpha is not None:
            from costmodel.engine.acceptance import chain_tokens_per_step
            implied = float(chain_tokens_per_step(float(alpha), g))
            if abs(implied - float(tau)) > 0.05 * float(tau):
                pre.append(("inconsistent", "mean_accepted_tokens",
                            f"α = {float(alpha):g} at γ = {g:g} gives τ = {implied:.2f}, but the claim states τ = {float(tau):g}"))
                fields.pop("mean_accepted_tokens")
    if strat == "tree" and tau is not None and fields.get("tree_depth") is not None and \
            float(tau) > float(fields["tree_depth"]) + 1:
        pre.append(("impossible", "mean_accepted_tokens",
                    f"τ = {float(tau):g} exceeds tree depth + 1 = {float(fields['tree_depth']) + 1:g}"))
        fields["mean_accepted_tokens"] = float(fields["tree_depth"]) + 1.0
    note_fit = None
    blind = "hardware" not in fields and all(m == "recommended_strategy" for m, _, _ in figs)
    results = []
    if blind:
        r = _recommend(fields)
        for metric, cv, text in figs:
            results.append(_judge_recommendation(cv, r, band, text))
    else:
        rec = _parse(fields, src)
        pred = Predictor(fields, rec, band)
        lim = hard_limits(rec, pred.out)
        if not pred.out["fits"] and lim.fits_floor and not any(m == "fits" for m, _, _ in figs):
            note_fit = (f"note: the model's predicted peak of {_g(pred.out['peak_device_memory_bytes'], 'B')} "
                        f"exceeds the {_g(pred.out['usable_memory_bytes'], 'B')} usable")
        rel = c.get("relative_to")
        compare = str(c.get("compare", "ratio"))
        if compare not in ("ratio", "difference"):
            raise InputError(f"unknown compare {compare!r}", source=src, field="compare", allowed="ratio, difference")
        lim_other = None
        for metric, cv, text in figs:
            b, basis = band.for_metric(metric, rec.batch_size)
            if rel and compare == "ratio" and metric in RATE_METRICS:
                b, basis = band.for_metric("speedup_vs_ar")       # a ratio of two rates is a speedup
                basis += " (a ratio of two rates)"
            if rel:
                if not isinstance(rel, dict):
                    raise InputError("must be a mapping of record overrides", source=src, field="relative_to")
                p, other = pred.value(metric, rel, compare)
                lim_other = lim_other or hard_limits(other.rec, other.out)
            else:
                p = pred.value(metric)
            fig = {"metric": metric, "claimed": cv.raw, "predicted": _num(p), "band": b}
            if text:
                fig["text"] = text
            # hard bounds
            not_fit = (not lim.fits_floor) or (lim_other is not None and not lim_other.fits_floor)
            if not_fit and not (metric == "fits" and cv.name == "false"):
                which = lim if not lim.fits_floor else lim_other
                fig.update(verdict="impossible",
                           reason=f"does not fit: at least {_g(which.mem_floor, 'B')} of weights and prompt KV "
                                  f"must be resident on a device with {_g(which.usable, 'B')} usable")
                results.append(fig)
                continue
            why = bound_violation(metric, cv, lim, relative=bool(rel))
            if why is None and rel and metric in ("tokens_per_s", "tokens_per_s_per_seq") and \
                    rel.get("strategy") == "autoregressive" and compare == "ratio":
                why = bound_violation("speedup_vs_ar", cv, lim)
            if why:
                fig.update(verdict="impossible", reason=why)
            elif metric in CATEGORICAL or cv.kind in ("name", "bool"):
                fig.update(_judge_category(metric, cv, p, pred, band, rec))
            else:
                v, why = band_verdict(metric, cv, p, b, basis, relative=bool(rel) and compare == "ratio")
                fig.update(verdict=v, reason=why)
            results.append(fig)
        if not rel:
            for v, metric, why in _identity_checks({m: cv for m, cv, _ in figs}, pred, lim, tau is not None):
                results.append({"metric": metric, "claimed": None, "predicted": None, "verdict": v, "reason": why})
    for v, metric, why in pre:
        results.insert(0, {"metric": metric, "claimed": c.get(metric), "predicted": None, "verdict": v, "reason": why})
    top = max(results, key=lambda r: (SEVERITY[r["verdict"]], _deviation(r)))
    worst = [r for r in results if SEVERITY[r["verdict"]] == SEVERITY[top["verdict"]]]
    reason = top["reason"]
    if len(results) > 1:
        if not reason.startswith("does not fit"):
            reason = f"{top['metric']}: {reason}"
        if len(worst) > 1:
            reason += f" (and {len(worst) - 1} more {top['verdict']} figure{'s' if len(worst) > 2 else ''})"
    names = {m for m, _, _ in figs}
    real = [r for r in results if r["metric"] in names and "band" in r]
    if len(figs) == 1:
        claimed, predicted = figs[0][1].raw, real[0]["predicted"] if real else None
        base["metric"] = figs[0][0]
    elif len({m for m, _, _ in figs}) < len(figs):          # one metric given several times
        claimed = [{m: cv.raw} for m, cv, _ in figs]
        predicted = {r["metric"]: r["predicted"] for r in real}
    else:
        claimed = {m: cv.raw for m, cv, _ in figs}
        predicted = {r["metric"]: r["predicted"] for r in real}
    if note_fit and top["verdict"] != "impossible":
        reason += f" [{note_fit}]"
    base.update(verdict=top["verdict"], reason=reason, claimed=claimed, predicted=predicted, figures=results)
    if c.get("relative_to"):
        base["relative_to"] = c["relative_to"]
        base["compare"] = c.get("compare", "ratio")
    return base


def _deviation(r: dict) -> float:
    """|predicted − claimed| / |claimed| of a point figure (to pick the figure a reason quotes)."""
    c, p = r.get("claimed"), r.get("predicted")
    if isinstance(c, (int, float)) and not isinstance(c, bool) and isinstance(p, (int, float)) and c:
        return abs(p - c) / abs(c)
    return 0.0


def _num(p):
    if isinstance(p, (bool, np.bool_)):
        return bool(p)
    if isinstance(p, str):
        return p
    try:
        f = float(p)
    except (TypeError, ValueError):
        return p
    return f if math.isfinite(f) else None


def _judge_category(metric: str, cv: Claimed, p, pred: Predictor, band: ErrorBand, rec) -> dict:
    if metric == "fits" or cv.kind == "bool":
        pv = bool(p)
        if (cv.name == "true") == pv:
            return {"verdict": "consistent", "reason": f"claims fits = {cv.name}; the model agrees "
                    f"(peak {_g(pred.out['peak_device_memory_bytes'], 'B')} of {_g(pred.out['usable_memory_bytes'], 'B')})"}
        peak, use = pred.out["peak_device_memory_bytes"], pred.out["usable_memory_bytes"]
        if cv.name == "true":
            return {"verdict": "optimistic", "reason": f"claims it fits; the model predicts a peak of {_g(peak, 'B')} "
                    f"over the {_g(use, 'B')} usable (the weights + prompt KV floor itself fits)"}
        return {"verdict": "pessimistic", "reason": f"claims it does not fit; the model predicts a peak of "
                f"{_g(peak, 'B')} within the {_g(use, 'B')} usable"}
    if metric == "bound":
        if cv.name == str(p):
            return {"verdict": "consistent", "reason": f"claims {cv.name}-bound; the model agrees"}
        return {"verdict": "inconsistent", "reason": f"claims {cv.name}-bound, but this configuration's own bytes "
                f"and FLOPs make it {p}-bound (arithmetic intensity {pred.out['arithmetic_intensity']:.3g} FLOP/B)"}
    if metric == "recommended_strategy":
        return _judge_recommendation(cv, _recommend(pred.fields), band, None, fig_only=True)
    raise InputError(f"metric {metric!r} is not categorical", field="metric")


def _judge_recommendation(cv: Claimed, r: dict, band: ErrorBand, text, fig_only=False) -> dict:
    want = {"ar": "autoregressive", "spec": "speculative", "shared": "shared_prefix"}.get(cv.name, cv.name)
    if want not in STRATEGIES:
        raise InputError(f"unknown strategy {cv.raw!r}", field="recommended_strategy", allowed=", ".join(STRATEGIES))
    b, basis = band.for_metric("speedup_vs_ar")       # a ratio of two strategies' throughput
    best = r.get("recommended")
    fig = {} if fig_only else {"metric": "recommended_strategy", "claimed": cv.raw, "predicted": best, "band": b}
    if text and not fig_only:
        fig["text"] = text
    if "win_probability" in r:
        wp, wc = r["win_probability"].get(want, 0.0), r["worst_case_ratio"].get(want, 0.0)
        bw = r["worst_case_ratio"].get(best, 0.0) if best else 0.0
        if want == best:
            fig.update(verdict="consistent", reason=f"the model also recommends {want} ({r['reason']})")
        elif bw > 0 and wc >= bw * (1 - b):
            fig.update(verdict="consistent", reason=f"the model prefers {best} ({want} wins on {wp:.0%} of the devices), "
                       f"but the gap is within the ±{b:.0%} band: {want} is never worse than {wc:.2f}× the best "
                       f"({r['reason']})")
        else:
            fig.update(verdict="optimistic", reason=f"{want} wins on {wp:.0%} of the devices and falls to {wc:.2f}× "
                       f"the best; the model recommends {best} ({r['reason']})")
        return fig
    ratio = next((c["ratio_to_best"] for c in r["candidates"] if c["strategy"] == want), 0.0)
    if want == best:
        fig.update(verdict="consistent", reason=f"the model also recommends {best}: {r['reason']}")
    elif ratio >= 1 - b:
        fig.update(verdict="consistent", reason=f"the model prefers {best}, but {want} is within the ±{b:.0%} band "
                   f"of it ({ratio:.2f}×): {r['reason']}")
    else:
        fig.update(verdict="optimistic", reason=f"the model recommends {best}; {want} reaches only {ratio:.2f}× the "
                   f"best: {r['reason']}")
    return fig


# --------------------------------------------------------------------------- entry point
def check(claims, *, band=None) -> dict:
    """Check claims (a path to a claims YAML, a mapping with ``claims:``, or a list of claim mappings)
    against the model and its validation error band (``band``: path, mapping or None for the project's
    ``validation/error_band.yaml``). Returns ``{"claims": [{"id", "verdict", "reason", "claimed",
    "predicted", ...}], "summary": {verdict: count}, "band": {...}}``; see the module docstring."""
    b = load_error_band(band)
    if isinstance(claims, (str, os.PathLike)):
        items = load_claims(claims)
    elif isinstance(claims, dict) and "claims" in claims:
        items = list(claims["claims"])
    elif isinstance(claims, (list, tuple)):
        items = list(claims)
    else:
        raise InputError("claims must be a path, a mapping with 'claims:', or a list of claims")
    out = []
    ids = set()
    _REC_CACHE.clear()
    for i, c in enumerate(items):
        if not isinstance(c, dict):
            raise InputError("each claim must be a mapping", field=f"claims[{i}]")
        cid = str(c.get("id", f"claim-{i + 1}"))
        if cid in ids:
            raise InputError(f"duplicate claim id {cid!r}", field=f"claims[{i}].id")
        ids.add(cid)
        c = dict(c, id=cid)
        out.append(check_claim(c, b))
    summary = {v: sum(1 for r in out if r["verdict"] == v) for v in VERDICTS}
    return {"claims": out, "summary": {k: v for k, v in summary.items() if v},
            "band": {"source": b.source, "overall_p90_abs_rel_error": b.overall}}
