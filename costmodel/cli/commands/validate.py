"""``costmodel validate [CSV ...] [--fit] [--report]``: predictions against published measurements.

Without flags: every row predicted with the current runtime profiles (for the project's own data
these were fitted on the same rows, so the errors are *in sample*); the table output leads with the
held-out figures recorded by the last ``--report`` (``validation/error_band.yaml``). ``--report``: held-out
errors (leave-one-publication-out refits, see :mod:`costmodel.calibration.calibrate`), written to REPORT.md,
a log-log PNG and error_band.yaml. ``--fit``: the same held-out run, plus the all-rows fit written into
``runtimes/*.yaml`` (with provenance) and ``calibration.yaml``.
"""

from __future__ import annotations

from pathlib import Path


def register(subparsers, common):
    p = subparsers.add_parser(
        "validate", parents=[common],
        help="compare predictions with published measurements (default: the project's validation/ data)",
        description="Per-row prediction and relative error, summarised overall and by metric, strategy, "
                    "hardware and runtime. --report/--fit give held-out (leave-one-source-out) errors.")
    p.add_argument("csv", nargs="*", metavar="CSV", help="measurement CSVs (records plus id, metric, value, "
                   "source); default: validation/measurements.csv and measurements_serving.csv")
    p.add_argument("--fit", action="store_true",
                   help="fit the runtime parameters (calibration) and write them to runtimes/*.yaml and "
                        "calibration.yaml; reports held-out errors")
    p.add_argument("--report", action="store_true",
                   help="write REPORT.md, the predicted-vs-measured PNG and error_band.yaml (held-out errors)")
    p.add_argument("--by", choices=("publication", "group", "source"), default="publication",
                   help="held-out folds: one publication (publication, default; 'source' is an alias) or one "
                        "source table (group)")
    p.add_argument("--output-dir", metavar="DIR", default=None,
                   help="where --report/--fit write their files (default: validation/)")
    p.add_argument("--rows", action="store_true", help="table output: list every row, not only the summary")
    p.set_defaults(func=run)
    return p


def run(args):
    from costmodel.cli import format as fmt
    from costmodel.cli.main import emit
    from costmodel.calibration.validate import VALIDATION_DIR, default_paths, load_measurements, summarize, validate

    paths = [Path(c) for c in args.csv] or default_paths()
    ms = load_measurements(paths)
    # names for provenance and reports: never an absolute machine path
    files = [f"validation/{p.name}" if p.resolve().parent == VALIDATION_DIR.resolve() else p.name for p in paths]
    out_dir = Path(args.output_dir) if args.output_dir else VALIDATION_DIR
    written = []
    if args.fit or args.report:
        from costmodel.calibration import calibrate, report
        from costmodel.errors import InputError
        from costmodel.inputs.outputs import check_output_path
        if not out_dir.is_dir():
            raise InputError("output folder not found", source=str(out_dir)[:300], field="--output-dir")
        for name in ("REPORT.md", "calibration.yaml"):      # every file is checked before the fit runs
            check_output_path(out_dir / name, None, field="--output-dir")
        by = "publication" if args.by == "source" else args.by
        loso = calibrate.leave_one_source_out(ms, by=by)
        rows = loso["rows"]
        summary = dict(summarize(rows), mode=f"held_out (leave-one-{'table' if by == 'group' else 'publication'}-out)")
        date = calibrate.today()
        if args.fit:
            split = f"{', '.join(files)} (all rows; held-out errors by leave-one-{'table' if by == 'group' else 'publication'}-out)"
            written += calibrate.write_fit(loso, split, out_dir, date=date)
        if args.report:
            in_sample = validate(ms, runtimes=calibrate.runtimes_from_fit(loso["full_fit"]))
            other = calibrate.leave_one_source_out(ms, by="group" if by == "publication" else "publication")
            ablation = calibrate.ablate(ms, by=by)
            written += report.write_report(loso, ms, out_dir, in_sample=in_sample, other=other, files=files,
                                              date=date, ablation=ablation)
        result = {"rows": rows, "summary": summary, "fit": {r: e["params"] for r, e in loso["full_fit"].items()},
                  "written": written}
    else:
        result = validate(ms)
        result["summary"]["mode"] = "current runtime profiles (in sample for the project's own data)"
    if args.format == "json":
        emit(args, result)
        return
    if args.format == "csv":
        print(fmt.csv_text([{k: r.get(k) for k in ("id", "metric", "measured", "predicted", "rel_error",
                                                    "strategy", "hardware", "runtime", "model", "source_group")}
                            for r in result["rows"]]), end="")
        return
    n = result["summary"]["n"]
    if args.fit or args.report:
        unit = "table" if by == "group" else "publication"
        lead = [f"costmodel validate: held-out errors of {n} numeric rows (leave-one-{unit}-out: each {unit}'s "
                f"rows predicted with runtime parameters fitted on the other rows)"]
    elif args.csv:
        lead = [f"costmodel validate: {n} numeric rows, predicted with the current runtime profiles (fitted on "
                "the project's validation data, not on these rows)"]
    else:
        lead = held_out_lines(VALIDATION_DIR / "error_band.yaml", n)
    print(render_table(result, show_rows=args.rows, lead=lead))
    for w in written:
        print(f"wrote {w}")


def held_out_lines(band_path: Path, n: int) -> list:
    """The lead of plain ``costmodel validate`` on the project's data: the held-out figures recorded by
    the last ``--report`` (error_band.yaml), then what the table below shows (in-sample errors)."""
    from costmodel.errors import InputError
    from costmodel.inputs.specs import load_yaml
    try:
        band = load_yaml(band_path)
        o = band["overall"]
        how = str(band.get("source", "")).split(" held-out")[0] or "held out"
        first = (f"costmodel validate: held-out error median {100 * o['median_abs_rel_error']:.1f}%, p90 "
                 f"{100 * o['p90_abs_rel_error']:.1f}%"
                 + (f", {100 * o['within_25pct']:.1f}% of rows within 25%" if "within_25pct" in o else "")
                 + f" ({o['n']} rows, {how}, recorded by the last 'costmodel validate --report' "
                   f"in {band_path.name})")
    except (InputError, KeyError, TypeError):
        first = "costmodel validate: held-out error not recorded yet (run 'costmodel validate --report')"
    return [first, f"table below: in-sample errors of {n} numeric rows (runtime parameters fitted on these same "
                   "rows, so they flatter the model: quote the held-out figures; '--report' recomputes them)"]


def categorical_line(result: dict) -> str:
    """What the categorical rows are and how many agree, naming the ones that do not."""
    cat = [r for r in result["rows"] if r["rel_error"] is None]
    if not cat:
        return ""
    agree = sum(bool(r.get("agree")) for r in cat)
    off = [f"{r['id']}: predicted {'fits' if r['predicted'] else 'does not fit'}, measured "
           f"{'fits' if r['measured'] else 'out of memory'}" for r in cat if not r.get("agree")]
    return (f"{len(cat)} categorical row{'s' if len(cat) != 1 else ''} (a yes/no outcome such as 'fits': does "
            f"it fit in memory?) compared for agreement, outside the error statistics: {agree} of "
            f"{len(cat)} agree" + (f" ({'; '.join(off)})" if off else ""))


def render_table(result: dict, show_rows: bool = False, lead=()) -> str:
    """The summary table, led by ``lead`` (which errors these are) and the categorical rows' line."""
    from costmodel.cli import format as fmt
    s = result["summary"]
    out = list(lead) or [f"costmodel validate: {s['n']} numeric rows"]
    cat = categorical_line(result)
    if cat:
        out.append(cat)

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    cols = (("group", "group", None, "{}"), ("n", "n", None, "{}"), ("median", "median |err|", None, "{}"),
            ("p90", "p90 |err|", None, "{}"), ("within", "within 25%", None, "{}"),
            ("signed", "median err", None, "{}"))

    def rows_of(title, groups):
        return [{"group": f"{title}: {k}", "n": v["n"], "median": pct(v["median_abs_rel_error"]),
                 "p90": pct(v["p90_abs_rel_error"]), "within": pct(v["within_25pct"]),
                 "signed": pct(v["median_rel_error"])} for k, v in groups.items()]

    table = rows_of("all", {"rows": s}) + rows_of("timing", {"only": s["timing_only"]})
    for key in ("metric", "strategy", "hardware", "runtime"):
        table += rows_of(key, s[f"by_{key}"])
    out.append(fmt.table(table, cols))
    if show_rows:
        rcols = (("id", "id", None, "{}"), ("metric", "metric", None, "{}"), ("measured", "measured", None, "{}"),
                 ("predicted", "predicted", None, "{}"), ("err", "rel err", None, "{}"))
        rr = [{"id": r["id"], "metric": r["metric"], "measured": f"{r['measured']:.4g}" if not isinstance(
            r["measured"], bool) else str(r["measured"]), "predicted": f"{r['predicted']:.4g}" if not isinstance(
            r["predicted"], bool) else str(r["predicted"]), "err": "-" if r["rel_error"] is None else
            f"{100 * r['rel_error']:+.1f}%"} for r in result["rows"]]
        out.append(fmt.table(rr, rcols))
    return "\n".join(out)
