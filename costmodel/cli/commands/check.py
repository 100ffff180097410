"""``costmodel check CLAIMS.yaml``: a verdict per claim (formulas in costmodel/analysis/claims.py)."""

from __future__ import annotations


def _short(v, metric=None, width=40):
    if isinstance(v, dict):
        s = ", ".join(f"{k}={_fmt(x, k)}" for k, x in v.items())
    elif isinstance(v, list) and v and isinstance(v[0], dict):
        s = ", ".join(_short(x, width=10 ** 6) for x in v)
    else:
        s = _fmt(v, metric)
    return s if len(s) <= width else s[: width - 1] + "…"


def _fmt(x, metric=None):
    from costmodel.analysis.claims_model import unit_of
    if isinstance(x, bool) or x is None:
        return "" if x is None else str(x).lower()
    if isinstance(x, (int, float)):
        unit = unit_of(metric) if metric else ""
        if unit == "B":
            return f"{x / 1e9:.3g} GB"
        if unit == "s":
            return f"{x * 1e3:.3g} ms"
        return f"{x:.3g}"
    if isinstance(x, list):
        return "–".join(_fmt(i, metric) for i in x)
    return str(x)


def cmd_check(args):
    from costmodel.cli import format as fmt
    from costmodel.analysis.claims import check
    from costmodel.cli.main import emit
    res = check(args.claims, band=args.band)
    if args.markdown:
        print(markdown_table(res))
        return
    if args.format == "json":
        emit(args, res)
        return
    rows = []
    for c in res["claims"]:
        m = None if c.get("compare") == "ratio" else c.get("metric")
        rows.append({"id": c["id"], "verdict": c["verdict"], "claimed": _short(c["claimed"], m),
                     "predicted": _short(c["predicted"], m), "reason": c["reason"]})
    if args.format == "csv":
        emit(args, res, rows=rows)
        return
    cols = (("id", "id", None, "{}"), ("verdict", "verdict", None, "{}"), ("claimed", "claimed", None, "{}"),
            ("predicted", "predicted", None, "{}"), ("reason", "reason", None, "{}"))
    print(fmt.table(rows, cols))
    print()
    print("summary: " + ", ".join(f"{k} {v}" for k, v in res["summary"].items())
          + f"  (error band: {res['band']['source']}, overall p90 ±{res['band']['overall_p90_abs_rel_error']:.0%})")


def _cell(x: str) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def markdown_table(res: dict, reason_chars: int = 220) -> str:
    """The verdict table as Markdown (for the README / docs): claim, claimed, predicted, verdict, why."""
    lines = ["| claim | the article says | claimed | model | verdict | why |", "|---|---|---|---|---|---|"]
    for c in res["claims"]:
        m = None if c.get("compare") == "ratio" else c.get("metric")
        text = c.get("text", "")
        text = text if len(text) <= 110 else text[:109] + "…"
        why = c["reason"] if len(c["reason"]) <= reason_chars else c["reason"][: reason_chars - 1] + "…"
        lines.append(f"| `{c['id']}` | {_cell(text)} | {_cell(_short(c['claimed'], m, 60))} | "
                     f"{_cell(_short(c['predicted'], m, 60))} | **{c['verdict']}** | {_cell(why)} |")
    counts = ", ".join(f"{v} {k}" for k, v in res["summary"].items())
    lines.append("")
    lines.append(f"{len(res['claims'])} claims: {counts}. Error band: overall p90 ±"
                 f"{res['band']['overall_p90_abs_rel_error']:.0%} (held-out validation).")
    return "\n".join(lines)


def register(sub, common):
    p = sub.add_parser("check", parents=[common], help="check claims against the model: costmodel check CLAIMS.yaml",
                       description="Verdict per claim: consistent, optimistic, pessimistic, impossible, "
                                   "inconsistent (or not_checkable). See docs/decisions.md.")
    p.add_argument("claims", metavar="CLAIMS.yaml")
    p.add_argument("--band", metavar="FILE", default=None,
                   help="validation error band YAML (default: validation/error_band.yaml, written by "
                        "`costmodel validate --report`)")
    p.add_argument("--markdown", action="store_true", help="print the verdict table as Markdown")
    p.set_defaults(func=cmd_check)
