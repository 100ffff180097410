"""``costmodel recommend KEY=VALUE ...``: the best strategy, with or without a hardware profile."""

from __future__ import annotations

from costmodel.errors import InputError, shown


def _range(text: str, name: str):
    parts = text.replace("..", ":").split(":")
    try:
        if len(parts) > 2 or not text.isascii():
            raise ValueError(text)
        vals = [float(p) for p in parts]
    except ValueError:
        raise InputError(f"expected LOW:HIGH in SI units, got {shown(text)}", field=name,
                         allowed="e.g. 3e11:3.35e12") from None
    if len(vals) == 1:
        vals = vals * 2
    return tuple(vals)     # finiteness and physical range: costmodel.analysis.recommend


def cmd_recommend(args):
    from costmodel.cli import format as fmt
    from costmodel.cli.main import emit, parse_kv
    from costmodel.analysis.recommend import recommend
    rec = parse_kv(args.fields)
    env = {}
    for key, val in (("bandwidth_bytes_per_s", args.bandwidth), ("matrix_flops_per_s", args.flops),
                     ("l2_bytes", args.l2), ("capacity_bytes", args.capacity)):
        if val:
            env[key] = _range(val, "--" + {"bandwidth_bytes_per_s": "bandwidth", "matrix_flops_per_s": "flops",
                                          "l2_bytes": "l2", "capacity_bytes": "capacity"}[key])
    hw_list = [h for h in (args.hardware_list or "").split(",") if h.strip()] or None
    res = recommend(rec, objective=args.objective, envelope=env or None, samples=args.samples, seed=args.seed,
                    hardware_list=hw_list)
    if args.format == "json":
        emit(args, res)
        return
    if res.get("mode") == "under load":
        from costmodel.cli.commands.plan import LOAD_COLUMNS
        rows = res["candidates"]
        cols = LOAD_COLUMNS
    elif "win_probability" in res:
        rows = res["candidates"]
        cols = (("strategy", "strategy", None, "{}"), ("win_probability", "win prob", 1, "{:.2f}"),
                ("worst_case_ratio", "worst ratio to best", 1, "{:.2f}"),
                ("worst_case_hardware", "worst on", None, "{}"), ("mean_ratio_to_best", "mean ratio", 1, "{:.2f}"),
                ("fit_probability", "fits on", 1, "{:.0%}"))
    else:
        rows = []
        for c in res["candidates"]:
            r = dict(c)
            r["config"] = ", ".join(f"{k}={v}" for k, v in c["config"].items())
            rows.append(r)
        cols = (("strategy", "strategy", None, "{}"), ("config", "config", None, "{}"),
                ("tokens_per_s", "tok/s total", 1, "{:.1f}"), ("tokens_per_s_per_seq", "tok/s/seq", 1, "{:.1f}"),
                ("step_latency_s", "step ms", 1e3, "{:.2f}"), ("tokens_per_step", "tok/step/seq", 1, "{:.2f}"),
                ("speedup_vs_ar", "vs AR", 1, "{:.2f}x"),
                ("peak_device_memory_bytes", "peak GB/device", 1e-9, "{:.1f}"),
                ("fits", "fits", None, "{}"), ("bound", "bound", None, "{}"), ("ratio_to_best", "vs best", 1, "{:.2f}"))
    if args.format == "csv":
        emit(args, res, rows=[{k: r.get(k) for k, *_ in cols} for r in rows])
        return
    if res.get("mode"):
        print(res["mode"])
    print(f"recommended: {res['recommended']}")
    print(f"reason: {res['reason']}")
    for n in res.get("notes", []):
        print(f"note: {n}")
    print()
    print(fmt.table(rows, cols))
    if "win_probability" not in res:
        print("tok/s total: all sequences over all devices; tok/s/seq and tok/step/seq: one sequence; "
              "peak GB/device: the most loaded device")


def register(sub, common):
    p = sub.add_parser("recommend", parents=[common],
                       help="best strategy for a workload: costmodel recommend KEY=VALUE ... (no hardware= "
                            "for hardware-blind mode)",
                       description="Compares autoregressive, speculative, tree (and shared_prefix when "
                                   "n_branches > 1), each tuned, and explains the choice by the bottleneck. "
                                   "Without hardware=, evaluates over the hardware zoo or an envelope.")
    p.add_argument("fields", nargs="+", metavar="KEY=VALUE")
    p.add_argument("--objective", default="tokens_per_s",
                   choices=("tokens_per_s", "tokens_per_s_per_seq", "time_per_output_token_s", "e2e_latency_s"),
                   help="what 'best' means (default: aggregate tokens_per_s)")
    g = p.add_argument_group("hardware-blind envelope (SI units, LOW:HIGH; ranges not given span the zoo)")
    g.add_argument("--bandwidth", metavar="LO:HI", help="HBM bandwidth, bytes/s")
    g.add_argument("--flops", metavar="LO:HI", help="dense fp16 matrix FLOP/s")
    g.add_argument("--l2", metavar="LO:HI", help="L2 capacity, bytes")
    g.add_argument("--capacity", metavar="LO:HI", help="device memory, bytes")
    g.add_argument("--samples", type=int, default=64, help="devices drawn from the envelope (default 64)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    g.add_argument("--hardware-list", metavar="ID,ID,...", help="hardware-blind over these devices instead of the zoo")
    p.set_defaults(func=cmd_recommend)
