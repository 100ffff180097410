"""Predictions against published measurements (``costmodel validate``).

A measurement is a record (fields: costmodel/inputs/fields.py) plus ``id``, ``metric`` (an output key of
:func:`costmodel.evaluate`), ``value`` (SI units of that key) and ``source``. For each row

    rel_error = (predicted − measured) / measured        (> 0: the model is optimistic for rates,
                                                           pessimistic for times and sizes)

and the summary gives n, the median and 90th percentile of |rel_error| and the share of rows within
25 %, overall and grouped by metric, strategy, hardware and runtime. A categorical metric (``fits``)
is compared for agreement and kept out of the error statistics.

Metric aliases for other people's CSVs: ``ms_per_token`` (ms → ``time_per_output_token_s``),
``memory_gb``/``memory_gib`` (GiB → ``peak_device_memory_bytes``), ``tokens_per_s_per_user``,
``oom_observed`` (1 → ``fits`` = false). Columns that describe the measurement rather than the
configuration (``source_group``, ``method``, ``framework``, …) are ignored; any other unknown column
is an input error naming the file, row and field.

Runtime parameters can be overridden per runtime id (``runtimes={"eager": Runtime(...)}``): that is
how :mod:`costmodel.calibration.calibrate` evaluates a calibration fold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from costmodel.errors import InputError
from costmodel.inputs.record import Record, parse_record

VALIDATION_DIR = Path(__file__).resolve().parents[2] / "validation"
#: the project's measurement files: its own rows, and the serving-engine rows transcribed after the model was
#: built (reported separately as never seen; the rows not yet expressible are in excluded_serving.csv)
DEFAULT_FILES = ("measurements.csv", "measurements_serving.csv")

#: columns that describe a measurement and are not configuration fields
EXTRA_META = ("source_group", "publication", "throughput_definition", "calibrate", "method", "framework", "dataset", "derived_from", "baseline_value",
              "derived_step_cost_ratio", "temperature", "acc_kind", "gamma_or_tree", "source_url", "date")
#: alias -> (output key, scale applied to the value); 'invert' flips a 0/1 flag
METRIC_ALIASES = {
    "ms_per_token": ("time_per_output_token_s", 1e-3),
    "s_per_token": ("time_per_output_token_s", 1.0),
    "tbt_ms": ("time_per_output_token_s", 1e-3),
    "memory_gb": ("peak_device_memory_bytes", 2.0 ** 30),
    "memory_gib": ("peak_device_memory_bytes", 2.0 ** 30),
    "tokens_per_s_per_user": ("tokens_per_s_per_seq", 1.0),
    "oom_observed": ("fits", "invert"),
}
CATEGORICAL = ("fits",)
GROUP_KEYS = ("metric", "strategy", "hardware", "runtime")
#: metrics the runtime parameters cannot move (sizes): kept out of calibration fits
SIZE_METRICS = ("weights_bytes", "kv_bytes_per_token", "kv_cache_bytes", "peak_device_memory_bytes", "fits")
WITHIN = 0.25


@dataclass
class Measurement:
    """One validation row, parsed."""

    id: str
    metric: str
    value: float
    record: Record
    runtime: str                     # resolved runtime id
    group: str                       # source group (rows of one table of one publication)
    source: str = ""
    #: the publication the row comes from (CSV column ``publication``; blank = its source text, else its
    #: group): the unit of leave-one-publication-out, since a user's setup is a new publication
    publication: str = ""
    reliability: str = ""
    notes: str = ""
    #: whether the row may calibrate runtime parameters (CSV column ``calibrate``: yes / no, blank =
    #: yes). ``no`` marks a measurement that holds work outside its configuration (other requests'
    #: prefills in a served stream): it is predicted and reported, but fitting it would make a
    #: runtime parameter stand in for the missing work
    calibrate: bool = True
    where: str = ""                  # 'file:line' for messages
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def categorical(self) -> bool:
        return self.metric in CATEGORICAL


# ---------------------------------------------------------------------------------------------- loading

def default_paths() -> list[Path]:
    """The project's validation CSVs (``validation/measurements.csv``, ``measurements_serving.csv``)."""
    paths = [VALIDATION_DIR / f for f in DEFAULT_FILES if (VALIDATION_DIR / f).is_file()]
    if not paths:
        raise InputError("no default validation data found (validation/measurements.csv is part of a source "
                         "checkout)", allowed="give measurement CSV files: costmodel validate FILE.csv ...")
    return paths


def read_csv(paths) -> list[dict]:
    """Rows of one or more CSV files, each with ``_where`` = 'file:line'. Read by
    :func:`costmodel.inputs.specs.read_csv` (the csv module's strict rules: a BOM is dropped; an
    unclosed quote, a duplicate or empty column name or a row with extra cells is an error naming
    the file and line)."""
    from costmodel.inputs.specs import read_csv as read_rows
    rows = []
    for p in paths:
        p = Path(p)
        for line, r in read_rows(p):
            r["_where"] = f"{p.name}:{line}"
            rows.append(r)
    return rows


def _metric(name: str, value, where: str):
    key = str(name or "").strip()
    if not key:
        raise InputError("missing metric", source=where, field="metric")
    try:
        v = float(str(value).strip())
    except (TypeError, ValueError):
        raise InputError(f"value must be a number, got {value!r}", source=where, field="value") from None
    if not math.isfinite(v):
        raise InputError(f"value must be finite, got {value!r}", source=where, field="value")
    if key in METRIC_ALIASES:
        key, scale = METRIC_ALIASES[key]
        v = (0.0 if v else 1.0) if scale == "invert" else v * scale
    from costmodel.engine.evaluate import OUTPUT_KEYS
    allowed = set(OUTPUT_KEYS) | {"kv_bytes_per_token", "flops_per_token", "hbm_bytes_per_token",
                                  "arithmetic_intensity"}
    if key not in allowed:
        raise InputError(f"unknown metric {name!r}", source=where, field="metric",
                         allowed=", ".join(sorted(allowed | set(METRIC_ALIASES))))
    if key not in CATEGORICAL and v <= 0:
        raise InputError(f"a measured {key} must be > 0, got {v}", source=where, field="value")
    return key, v


def parse_measurement(row: dict, where: str | None = None) -> Measurement:
    """A CSV row / mapping -> :class:`Measurement` (InputError names the row and field)."""
    from costmodel.inputs.runtime import load_runtime
    where = where or str(row.get("_where") or row.get("id") or "measurement")
    rid = str(row.get("id") or where).strip()
    metric, value = _metric(row.get("metric"), row.get("value"), where)
    cfg = {k: v for k, v in row.items()
           if not k.startswith("_") and k not in EXTRA_META and k not in ("metric", "value")}
    rec = parse_record(cfg, source=where, allow_meta=True)
    rt = load_runtime(rec.runtime).id
    group = str(row.get("source_group") or row.get("source") or rid).strip()
    cal = str(row.get("calibrate") if row.get("calibrate") is not None else "").strip().lower()
    if cal not in ("", "yes", "no", "true", "false"):
        raise InputError(f"calibrate must be yes or no, got {row.get('calibrate')!r}", source=where,
                         field="calibrate", allowed="yes, no (blank = yes)")
    pub = str(row.get("publication") or row.get("source") or group).strip()
    return Measurement(id=rid, metric=metric, value=value, record=rec, runtime=rt, group=group, publication=pub,
                       source=str(row.get("source") or ""), reliability=str(row.get("reliability") or ""),
                       notes=str(row.get("notes") or ""), calibrate=cal not in ("no", "false"), where=where,
                       raw=dict(row))


def load_measurements(rows_or_paths=None) -> list[Measurement]:
    """Measurements from CSV paths, mappings or :class:`Measurement` objects (default: the project's data)."""
    if rows_or_paths is None:
        rows_or_paths = default_paths()
    if isinstance(rows_or_paths, (str, Path)):
        rows_or_paths = [rows_or_paths]
    if isinstance(rows_or_paths, (dict, Measurement)) or not hasattr(rows_or_paths, "__iter__"):
        raise InputError(f"expected a list of CSV paths or measurement mappings, got {type(rows_or_paths).__name__}",
                         field="measurements")
    items = list(rows_or_paths)
    paths = [x for x in items if isinstance(x, (str, Path))]
    out = []
    for r in read_csv(paths) if paths else []:
        out.append(parse_measurement(r))
    for i, x in enumerate(items):
        if isinstance(x, Measurement):
            out.append(x)
        elif isinstance(x, dict):
            out.append(parse_measurement(x, where=str(x.get("_where") or x.get("id") or f"row {i + 1}")))
        elif not isinstance(x, (str, Path)):
            raise InputError(f"a measurement must be a mapping, got {type(x).__name__}", source=f"row {i + 1}")
    from collections import Counter
    dup = sorted(i for i, n in Counter(m.id for m in out).items() if n > 1)       # linear in the rows
    if dup:
        raise InputError(f"duplicate measurement ids: {', '.join(dup[:5])}", field="id")
    return out


# ---------------------------------------------------------------------------------------------- predicting

def record_for(m: Measurement, runtimes: dict | None = None) -> Record:
    """The measurement's record, with its runtime replaced by ``runtimes[runtime id]`` when given (the
    engine version the row names, ``trt-llm@0.5``, still applies its attributes on top)."""
    if runtimes and m.runtime in runtimes:
        from costmodel.inputs.runtime import with_version
        return m.record.replace(runtime=with_version(runtimes[m.runtime], m.record.runtime))
    return m.record


def predict_arrays(m: Measurement, runtimes: dict | None = None, arrays: dict | None = None):
    """The model's value of ``m.metric`` (an array when ``arrays`` or array-valued runtimes are given)."""
    from costmodel.engine.evaluate import evaluate_arrays
    rec = record_for(m, runtimes)
    res = evaluate_arrays(rec, arrays, with_baseline=(m.metric == "speedup_vs_ar"))
    return res[m.metric]


def predict(m: Measurement, runtimes: dict | None = None):
    v = np.asarray(predict_arrays(m, runtimes)).ravel()[0]
    return bool(v) if m.categorical else float(v)


def row_result(m: Measurement, predicted) -> dict:
    out = {"id": m.id, "metric": m.metric, "measured": m.value, "predicted": predicted, "rel_error": None,
           "strategy": m.record.strategy, "hardware": m.record.hardware, "runtime": m.runtime,
           "model": m.record.model, "source_group": m.group, "publication": m.publication,
           "batch_size": m.record.batch_size}
    if m.categorical:
        out["measured"] = bool(m.value)
        out["agree"] = bool(predicted) == bool(m.value)
    else:
        out["rel_error"] = (predicted - m.value) / m.value
    return out


def stats(errors) -> dict:
    """n, median and 90th percentile of |rel error|, share within 25 %, median signed error."""
    e = np.asarray([x for x in errors if x is not None], dtype=float)
    if e.size == 0:
        return {"n": 0, "median_abs_rel_error": None, "p90_abs_rel_error": None, "within_25pct": None,
                "median_rel_error": None}
    a = np.abs(e)
    return {"n": int(e.size), "median_abs_rel_error": float(np.median(a)),
            "p90_abs_rel_error": float(np.percentile(a, 90)), "within_25pct": float(np.mean(a <= WITHIN)),
            "median_rel_error": float(np.median(e))}


def summarize(results: list[dict]) -> dict:
    """Overall and grouped statistics of row results (see module docstring)."""
    num = [r for r in results if r["rel_error"] is not None]
    s = stats(r["rel_error"] for r in num)
    for key in GROUP_KEYS:
        groups = {}
        for r in num:
            groups.setdefault(str(r[key]), []).append(r["rel_error"])
        s[f"by_{key}"] = {k: stats(v) for k, v in sorted(groups.items())}
    cat = [r for r in results if r["rel_error"] is None]
    s["categorical"] = {"n": len(cat), "agree": sum(bool(r.get("agree")) for r in cat)}
    from costmodel.analysis.claims_load import regime
    by_mr: dict = {}
    for r in num:
        by_mr.setdefault(r["metric"], {}).setdefault(regime(r.get("batch_size", 1)), []).append(r["rel_error"])
    s["by_metric_regime"] = {k: {g: stats(v) for g, v in sorted(d.items())} for k, d in sorted(by_mr.items())}
    timing = [r["rel_error"] for r in num if r["metric"] not in SIZE_METRICS]
    s["timing_only"] = stats(timing)
    return s


def validate(rows=None, *, runtimes: dict | None = None) -> dict:
    """Predict every measurement and summarise the errors.

    ``rows``: CSV paths, mappings (records plus id/metric/value/source) or :class:`Measurement`s;
    default: the project's ``validation/measurements.csv``. ``runtimes``: optional runtime overrides
    (runtime id -> :class:`costmodel.inputs.runtime.Runtime`). Returns
    ``{"rows": [{"id", "metric", "measured", "predicted", "rel_error", ...}], "summary": {...}}``
    where rel_error = (predicted − measured) / measured.
    """
    ms = load_measurements(rows)
    results = [row_result(m, predict(m, runtimes)) for m in ms]
    return {"rows": results, "summary": dict(summarize(results), mode="in_sample_or_user_data")}
