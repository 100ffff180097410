"""Output formatting for the CLI: aligned tables with units, JSON, CSV."""

from __future__ import annotations

import csv
import io
import json
import math

import numpy as np

# (key, header, scale, format) for the compact table of results
TABLE_COLUMNS = (
    ("label", "case", None, "{}"),
    ("hardware", "hardware", None, "{}"),
    ("n_devices", "dev", None, "{:.0f}"),
    ("strategy", "strategy", None, "{}"),
    ("step_latency_s", "step ms", 1e3, "{:.2f}"),
    ("tokens_per_step", "tok/step", 1, "{:.3f}"),
    ("tokens_per_s_per_seq", "tok/s/seq", 1, "{:.1f}"),
    ("tokens_per_s", "tok/s", 1, "{:.1f}"),
    ("time_per_output_token_s", "TPOT ms", 1e3, "{:.2f}"),
    ("ttft_s", "TTFT ms", 1e3, "{:.1f}"),
    ("peak_device_memory_bytes", "peak GB", 1e-9, "{:.2f}"),
    ("fits", "fits", None, "{}"),
    ("bound", "bound", None, "{}"),
    ("speedup_vs_ar", "vs AR", 1, "{:.2f}x"),
)

UNITS = (("_bytes", 1e-9, "GB"), ("_s", 1e3, "ms"), ("_flops", 1e-12, "TFLOP"))


def to_jsonable(v):
    if isinstance(v, dict):
        return {str(k): to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return to_jsonable(v.tolist())
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def dumps_json(obj) -> str:
    return json.dumps(to_jsonable(obj), indent=2)


def table(rows: list[dict], columns=None) -> str:
    """Aligned text table; ``columns``: (key, header, scale, fmt) tuples; keys missing everywhere are dropped."""
    columns = [c for c in (columns or TABLE_COLUMNS) if any(c[0] in r for r in rows)]
    cells = [[c[1] for c in columns]]
    for r in rows:
        line = []
        for key, _h, scale, fmt in columns:
            v = r.get(key, "")
            if v is None or v == "":
                line.append("")
            elif scale is not None and isinstance(v, (int, float)) and not isinstance(v, bool):
                line.append(fmt.format(v * scale))
            else:
                line.append(fmt.format(v) if not isinstance(v, float) else f"{v:.4g}")
        cells.append(line)
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    out = []
    for j, row in enumerate(cells):
        out.append("  ".join(s.rjust(w) if j and _numeric(s) else s.ljust(w) for s, w in zip(row, widths)).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _numeric(s: str) -> bool:
    try:
        float(s.rstrip("x"))
        return True
    except ValueError:
        return False


def key_value_table(d: dict) -> str:
    """Two-column table of one result with units in the names (bytes shown in GB, seconds in ms)."""
    lines = []
    for k, v in d.items():
        if isinstance(v, (list, dict)):
            continue
        label, shown = k, v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            for suffix, scale, unit in UNITS:
                if k.endswith(suffix) and not k.endswith("per_s"):
                    label, shown = f"{k[: -len(suffix)]} [{unit}]", v * scale
                    break
            shown = f"{shown:.6g}"
        lines.append((label, str(shown)))
    w = max(len(a) for a, _ in lines) if lines else 0
    notes = [f"note: {n}" for n in d.get("notes") or [] if isinstance(n, str)]
    return "\n".join([f"{a.ljust(w)}  {b}" for a, b in lines] + notes)


def csv_text(rows: list[dict]) -> str:
    """Rows as CSV; a text cell starting with = + - @ gets a leading ' (safe to open in a spreadsheet)."""
    from costmodel.inputs.outputs import safe_cell
    keys: list = []
    for r in rows:
        for k, v in r.items():
            if k not in keys and not isinstance(v, (list, dict)):
                keys.append(k)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: safe_cell(to_jsonable(r.get(k, ""))) for k in keys})
    return buf.getvalue()
