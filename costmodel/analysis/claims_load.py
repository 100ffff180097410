"""Reading claims: the validation error band, claim files, each claim's figures
and their values (a number, a range, an inequality, true/false or a name). Used by
:mod:`costmodel.analysis.claims`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from costmodel.errors import InputError, shown, shown_text

HIGHER_BETTER = {"tokens_per_s", "tokens_per_s_per_seq", "tokens_per_step", "speedup_vs_ar",
                 "arithmetic_intensity", "hardware.bandwidth_bytes_per_s", "hardware.capacity_bytes",
                 "hardware.usable_bytes", "hardware.l2_bytes", "hardware.matrix_flops_per_s.fp16",
                 "mean_accepted_tokens", "usable_memory_bytes"}
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
        from costmodel.inputs.specs import _path_test, input_path
        path = Path(band) if band is not None else default_band_path()
        if band is not None and _path_test(path.exists):
            path = input_path(path, "an error band YAML")          # a directory, a FIFO, ...
        elif band is not None and any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in path.parts):
            input_path(path, "an error band YAML")                 # raises: a name component over 255 bytes
        if not _path_test(path.is_file):
            raise InputError("no validation error band found: claims are judged against the model's measured "
                             "error, so run `costmodel validate --report` first (it writes "
                             "validation/error_band.yaml), or pass one with --band FILE", source=shown_text(str(path), 200))
        from costmodel.inputs.specs import load_yaml
        band, src = load_yaml(path), str(path)
    if not isinstance(band, dict) or not isinstance(band.get("overall"), dict):
        raise InputError("an error band needs 'overall: {n, median_abs_rel_error, p90_abs_rel_error}'",
                         source=src, field="overall")
    overall = _band_number(band["overall"].get("p90_abs_rel_error"), src, "overall.p90_abs_rel_error")
    by = band.get("by_metric") or {}
    if not isinstance(by, dict):
        raise InputError("must be a mapping metric -> {n, p90_abs_rel_error}", source=src, field="by_metric")
    by_metric = {}
    for k, v in by.items():
        where = f"by_metric.{shown_text(str(k), 60)}"
        v = _band_entry(v, src, where)
        n = v.get("n", 0)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(f"must be a row count (an integer >= 0), got {shown(n)}", source=src, field=where + ".n")
        by_metric[str(k)] = v
    byr = band.get("by_metric_regime") or {}
    if not isinstance(byr, dict) or not all(isinstance(v, dict) for v in byr.values()):
        raise InputError("must be a mapping metric -> regime -> {n, p90_abs_rel_error}", source=src,
                         field="by_metric_regime")
    by_regime = {}
    for k, regs in byr.items():
        by_regime[str(k)] = {}
        for r, x in regs.items():
            where = f"by_metric_regime.{shown_text(str(k), 60)}.{shown_text(str(r), 60)}"
            by_regime[str(k)][str(r)] = _band_entry(x, src, where)
    return ErrorBand(overall=overall, by_metric=by_metric, source=src, by_metric_regime=by_regime)


def _band_entry(v, src: str, where: str) -> dict:
    """One band entry ``{n, p90_abs_rel_error}`` (None = empty) as a new dict, its p90 checked."""
    if v is not None and not isinstance(v, dict):
        raise InputError("must be a mapping {n, p90_abs_rel_error}", source=src, field=where)
    v = dict(v or {})
    if v.get("p90_abs_rel_error") is not None:
        v["p90_abs_rel_error"] = _band_number(v["p90_abs_rel_error"], src, where + ".p90_abs_rel_error")
    return v


#: largest relative error a band may state: 10 = 1000 % (a band wider than that judges nothing)
MAX_BAND = 10.0


def _band_number(v, src: str, field: str) -> float:
    """A band's p90 |relative error|: a finite number in [0, MAX_BAND]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"must be a number, got {shown(v)}", source=src, field=field)
    if not 0 <= v <= MAX_BAND:         # also refuses nan, and an integer beyond float range
        raise InputError(f"out of range: {shown(v)}", source=src, field=field,
                         allowed=f"a relative error 0 <= p90 <= {MAX_BAND:g} ({MAX_BAND:.0%})")
    return float(v)


# --------------------------------------------------------------------------- loading
def load_claims(path) -> list:
    """Claims YAML: ``claims:`` list; optional ``bases: {name: {record fields}}`` used by a claim's
    ``base: name``. Relative model/hardware/runtime paths resolve against the file's folder."""
    from costmodel.inputs.file_kind import refuse_other_kind
    from costmodel.inputs.specs import load_yaml
    data = load_yaml(path)
    src = str(path)
    refuse_other_kind(data, src, "claims")
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
            if not isinstance(c["base"], str):
                raise InputError(f"must be the name of a base, got {shown(c['base'])}", source=src,
                                 field=f"claims[{i}].base", allowed=", ".join(map(str, bases)) or "(no bases defined)")
            b = bases.get(c["base"])
            if b is not None and not isinstance(b, dict):
                raise InputError("a base must be a mapping of record fields", source=src,
                                 field=f"bases.{shown_text(c['base'])}")
            if b is None:
                raise InputError(f"unknown base {shown(c['base'])}", source=src, field=f"claims[{i}].base",
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


def claim_figures(c: dict, src: str) -> list:
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


def _claim_number(x, src: str, metric: str) -> float:
    """A claimed number: finite (not nan/inf, not an integer beyond float range)."""
    try:
        f = float(x)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise InputError(f"a claimed value must be a finite number, got {shown(x)}", source=src, field=metric,
                         allowed="a finite number, [low, high], '< x' / '>= x', true/false, or a name")
    return f


def _text_number(s: str):
    """float(s) for plain ASCII number text, else None ('nan'/'inf' included: refused by the caller)."""
    if not s.isascii():
        return None
    try:
        return float(s)
    except ValueError:
        return None


def parse_value(v, src: str, metric: str) -> Claimed:
    if isinstance(v, bool):
        return Claimed("bool", name=str(v).lower(), raw=v)
    if isinstance(v, (int, float)):
        x = _claim_number(v, src, metric)
        return Claimed("point", x, x, raw=v)
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                            for x in v):
        lo, hi = sorted(_claim_number(x, src, metric) for x in v)
        return Claimed("range", lo, hi, raw=list(v))
    if isinstance(v, str):
        s = v.strip()
        for op, kind in (("<=", "le"), (">=", "ge"), ("<", "lt"), (">", "gt")):
            if s.startswith(op):
                x = _text_number(s[len(op):].strip())
                if x is None:
                    break
                x = _claim_number(x, src, metric)
                return Claimed(kind, x, x, raw=v)
        x = _text_number(s)
        if x is not None:
            x = _claim_number(x, src, metric)
            return Claimed("point", x, x, raw=v)
        if len(s) > 200:
            raise InputError(f"a claimed name is at most 200 characters, got {len(s)}", source=src, field=metric)
        if s.lower() in ("true", "false"):
            return Claimed("bool", name=s.lower(), raw=v)
        return Claimed("name", name=s.lower().replace("-", "_"), raw=v)
    raise InputError(f"unsupported claim value {shown(v)}", source=src, field=metric,
                     allowed="a number, [low, high], '< x' / '>= x', true/false, or a name")


def higher_is_better(metric: str) -> bool:
    """Direction of 'better' (a + b and a / b follow a)."""
    return metric in HIGHER_BETTER or metric.split("+")[0].split("/")[0].split("-")[0].strip() in HIGHER_BETTER
