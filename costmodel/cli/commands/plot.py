"""``costmodel plot decision-map|roofline|sweep KEY=VALUE ... --output FILE.png`` (costmodel/analysis/plots.py)."""

from __future__ import annotations

from costmodel.errors import InputError

KINDS = ("decision-map", "roofline", "sweep")


def _ints(text, name):
    try:
        vals = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", field=name) from None
    if not vals or min(vals) < 1:
        raise InputError("needs positive integers", field=name, value=text)
    return vals


def cmd_plot(args):
    from costmodel.analysis import plots
    from costmodel.cli.main import emit, parse_kv
    fields = parse_kv(args.fields)
    from costmodel.inputs.outputs import check_output_path
    out = check_output_path(args.output, plots.PLOT_TYPES, field="--output")     # before any work
    summary = {"plot": args.kind, "output": out}
    if args.kind == "decision-map":
        d = plots.decision_map(fields, out,
                               batch_sizes=_ints(args.batch_sizes, "--batch-sizes") if args.batch_sizes else None,
                               contexts=_ints(args.contexts, "--contexts") if args.contexts else None,
                               objective=args.objective)
        wins = {}
        for i in range(len(d["contexts"])):
            for j in range(len(d["batch_sizes"])):
                if d["fits"][i, j]:
                    k = d["names"][d["winner"][i, j]]
                    wins[k] = wins.get(k, 0) + 1
        summary["cells_won"] = wins
        summary["cells_nothing_fits"] = int((~d["fits"]).sum())
        summary["batch_sizes"] = ",".join(str(b) for b in d["batch_sizes"])
        summary["contexts"] = ",".join(str(c) for c in d["contexts"])
    elif args.kind == "roofline":
        d = plots.roofline(fields, out)
        summary["operators"] = len(d["ops"])
    else:
        axes = [k for k, v in fields.items() if "," in v and k not in ("rank_acceptance", "tree_parents")]
        if args.axis:
            axes = [args.axis]
        if len(axes) != 1 or axes[0] not in fields:
            raise InputError("a sweep plot needs exactly one axis given as KEY=V1,V2,...", field="axis",
                             allowed="e.g. batch_size=1,2,4,8,16 (or --axis KEY)")
        axis = axes[0]
        values = [v.strip() for v in fields.pop(axis).split(",") if v.strip()]
        strategies = [s.strip() for s in args.strategies.split(",")] if args.strategies else None
        plots.sweep(fields, axis, values, out, metric=args.metric, objective=args.objective, strategies=strategies)
        summary.update(axis=axis, metric=args.metric, points=len(values))
    if args.format == "table":
        print(f"wrote {out}")
        if args.kind == "decision-map":
            print(f"axes: batch sizes {summary['batch_sizes']}; contexts {summary['contexts']} "
                  f"({summary['cells_nothing_fits']} of {d['fits'].size} cells: nothing fits); "
                  "--batch-sizes and --contexts choose others")
    else:
        emit(args, summary, rows=[{k: v for k, v in summary.items() if not isinstance(v, dict)}])


def register(sub, common):
    p = sub.add_parser("plot", parents=[common], help="pictures: costmodel plot decision-map|roofline|sweep "
                                                      "KEY=VALUE ... --output FILE.png",
                       description="decision-map: the winning strategy over batch size × context length; "
                                   "roofline: the device's roofline with each phase's operators; sweep: a "
                                   "metric over one axis (KEY=V1,V2,...) per strategy.")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("fields", nargs="+", metavar="KEY=VALUE")
    p.add_argument("--output", "-o", required=True, metavar="FILE.png")
    p.add_argument("--objective", default="tokens_per_s",
                   choices=("tokens_per_s", "tokens_per_s_per_seq", "time_per_output_token_s", "e2e_latency_s"),
                   help="what 'best' means when tuning each strategy (default tokens_per_s)")
    p.add_argument("--batch-sizes", default=None,
                   help="decision-map columns, e.g. 1,8,64 (default: powers of two up to one past the largest "
                        "batch that fits on the device)")
    p.add_argument("--contexts", default=None,
                   help="decision-map rows, e.g. 512,4096 (default: powers of two from 128 up to one past the "
                        "longest context that fits at batch 1)")
    p.add_argument("--metric", default="tokens_per_s", help="sweep: the output key to plot (default tokens_per_s)")
    p.add_argument("--axis", help="sweep: the axis, when several fields contain commas")
    p.add_argument("--strategies", help="sweep: comma-separated subset of strategies to draw")
    p.set_defaults(func=cmd_plot)
