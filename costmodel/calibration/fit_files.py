"""The files calibration writes: the fitted values into ``runtimes/<id>.yaml`` (each with its
provenance, the rest of the file kept), the fit record ``calibration.yaml`` and the held-out
``error_band.yaml`` the claim checker reads. The fit itself: :mod:`costmodel.calibration.calibrate`."""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np

from costmodel.inputs.outputs import atomic_text

def today() -> str:
    """Today's date, ISO 8601."""
    return datetime.date.today().isoformat()


def provenance(fit_entry: dict, split: str, date: str | None = None) -> str:
    """The ``source`` text of a fitted value: what fitted it, on what, when and how."""
    return (f"fitted by costmodel validate --fit on {split}, {date or today()}, {fit_entry['n_rows']} rows "
            f"(soft-L1 log error; grid + scipy.optimize.least_squares); held-out errors in validation/REPORT.md")


def fmt_value(v: float) -> str:
    """A YAML float that PyYAML reads back as a float (dot and signed exponent)."""
    v = float(v)
    if v == 0:
        return "0.0"
    if 0.01 <= abs(v) < 1e4:
        t = f"{v:.4g}"
        return t if ("." in t or "e" in t) else t + ".0"
    m, e = f"{v:.4e}".split("e")
    return f"{m}e{int(e):+03d}"


def write_runtime_yaml(path, fit_entry: dict, split: str, date: str | None = None) -> bool:
    """Replace ``value`` and ``source`` of each fitted parameter in one runtime YAML, keeping the rest
    of the file as it is. Returns True when the file changed."""
    import re

    if not fit_entry.get("fitted"):
        return False
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    new = text
    src = provenance(fit_entry, split, date).replace('"', "'")
    for name, v in fit_entry["params"].items():
        line = f'{name}: {{value: {fmt_value(v)}, source: "{src}"}}'
        pat = re.compile(rf"^{re.escape(name)}:\s*\{{.*\}}\s*$", re.M)
        new = pat.sub(lambda _m: line, new, count=1) if pat.search(new) else new.rstrip("\n") + "\n" + line + "\n"
    if new != text:
        atomic_text(p, new)
    return new != text


def write_fit(loso: dict, split: str, out_dir, runtimes_dir=None, date: str | None = None) -> list:
    """Write the all-rows fit into ``runtimes/<id>.yaml`` and the fit record ``calibration.yaml``."""
    import yaml

    from costmodel.inputs.specs import zoo_dir
    rdir = Path(runtimes_dir) if runtimes_dir else zoo_dir("runtimes")
    written = []
    for rt_id, entry in sorted(loso["full_fit"].items()):
        path = rdir / f"{rt_id}.yaml"
        if path.is_file() and write_runtime_yaml(path, entry, split, date):
            written.append(str(path))
    from costmodel.calibration.validate import summarize
    s = summarize(loso["rows"])
    rec = {
        "written_by": "costmodel validate --fit",
        "date": date or today(),
        "split": split,
        "procedure": "per runtime: grid, finer grid, scipy.optimize.least_squares (trf, soft_l1, f_scale 0.1) on "
                     "ln(predicted/measured) of the runtime's timing rows; held-out errors by leave-one-"
                     f"{'table (source_group)' if loso['by'] == 'group' else 'publication'}-out",
        "fitted": {r: {"params": {k: float(v) for k, v in e["params"].items()}, "n_rows": e["n_rows"],
                       "rms_log_error": e.get("rms_log_error"), "rows": e["rows"]}
                   for r, e in sorted(loso["full_fit"].items()) if e.get("fitted")},
        "not_fitted": sorted(r for r, e in loso["full_fit"].items() if not e.get("fitted")),
        "held_out": {k: s[k] for k in ("n", "median_abs_rel_error", "p90_abs_rel_error", "within_25pct")},
        "folds": [{"held_out": f["held_out"], "n_rows": f["n_rows"],
                   "refitted": {r: {"params": v["params"], "n_rows": v["n_rows"]} for r, v in f["refitted"].items()}}
                  for f in loso["folds"]],
    }
    out = Path(out_dir) / "calibration.yaml"
    atomic_text(out, "# written by `costmodel validate --fit`: runtime parameters fitted on the validation data\n"
                + yaml.safe_dump(_plain(rec), sort_keys=False, width=110, default_flow_style=None))
    written.append(str(out))
    return written


def _plain(x):
    """``x`` with numpy scalars as Python numbers (floats rounded to 6 places or 6 significant digits)
    and tuples as lists, for YAML."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return float(round(float(x), 6)) if abs(float(x)) >= 1e-3 or x == 0 else float(f"{float(x):.6g}")
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def write_error_band(summary: dict, path, date: str | None = None, by: str = "publication") -> str:
    """``error_band.yaml``: the held-out error band the claim checker uses (overall and per metric)."""
    def band(s, within=False):
        return (f"{{n: {s['n']}, median_abs_rel_error: {s['median_abs_rel_error']:.6f}, "
                f"p90_abs_rel_error: {s['p90_abs_rel_error']:.6f}"
                + (f", within_25pct: {s['within_25pct']:.6f}" if within else "") + "}")
    what = "leave-one-table-out" if by == "group" else "leave-one-publication-out"
    lines = ["# written by `costmodel validate --report`; held-out errors",
             f'source: "{what} held-out errors of costmodel validate, {date or today()}"',
             f"overall: {band(summary, within=True)}", "by_metric:"]
    for k, s in summary["by_metric"].items():
        if s["n"]:
            lines.append(f"  {k}: {band(s)}")
    lines.append("by_metric_regime:      # batch1_latency: batch_size 1; batched_throughput: batch_size > 1")
    for k, regs in summary.get("by_metric_regime", {}).items():
        lines.append(f"  {k}:")
        for g, s in regs.items():
            lines.append(f"    {g}: {band(s)}")
    atomic_text(path, "\n".join(lines) + "\n")
    return str(path)
