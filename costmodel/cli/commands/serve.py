"""``costmodel serve KEY=VALUE ... [--max-rate | --frontier] [--plot FILE.png]`` — serving under load.

The record's deployment fields and the workload/scheduler fields (docs/serving.md) mix freely.
"""

from __future__ import annotations

import math

from costmodel.cli import format as fmt
from costmodel.cli.main import emit, parse_kv


def register(subparsers, common):
    p = subparsers.add_parser(
        "serve", parents=[common], help="simulate serving under load: arrivals, continuous batching, SLOs",
        description="Simulate a deployment under a request stream. Workload fields: request_rate, arrival, "
                    "arrival_cv, num_requests, duration_s, max_concurrency, prompt_len[_dist], gen_len[_dist], "
                    "shared_prompt_len, max_num_seqs, max_num_batched_tokens, chunked_prefill, block_size, num_scheduler_steps, "
                    "acceptance_sd, seed, replicas, prefill_instances, decode_instances, "
                    "slo_ttft_s, slo_tpot_s, slo_percentile; the deployment is a record (costmodel eval --help), "
                    "gamma_schedule included.")
    p.add_argument("fields", nargs="+", metavar="KEY=VALUE")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--max-rate", action="store_true", help="bisect the highest request_rate meeting the SLOs")
    g.add_argument("--frontier", action="store_true",
                   help="Pareto frontier of tokens/s per device vs tokens/s per user over max_num_seqs and TP")
    p.add_argument("--plot", metavar="FILE.png", help="with --max-rate: latency percentiles vs rate; "
                   "with --frontier: the frontier")
    p.set_defaults(func=run)


def run(args):
    from costmodel.serving import api
    fields = parse_kv(args.fields)
    if args.plot:                       # before the simulation: extension, folder
        from costmodel.inputs.outputs import check_output_path
        check_output_path(args.plot, (".png", ".svg", ".pdf"), field="--plot")
    if args.max_rate:
        out = api.max_rate(fields)
        if args.plot and out.get("at_max"):
            from costmodel.serving.plots import latency_vs_rate
            top = out["max_request_rate"]
            rates = [top * f for f in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25)]
            res = [api.serve(fields, request_rate=r) for r in rates]
            latency_vs_rate(res, args.plot, title=f"{fields.get('model')} on {fields.get('hardware')}")
        if args.format == "table":
            print(f"max_request_rate  {out['max_request_rate']:.4g} requests/s")
            if out.get("at_max"):
                print(fmt.key_value_table(_flat(out["at_max"])))
        else:
            emit(args, out, rows=[_flat(dict(out.get("at_max") or {}, max_request_rate=out["max_request_rate"]))])
        return
    if args.frontier:
        out = api.frontier(fields)
        if args.plot:
            from costmodel.serving.plots import frontier_plot
            frontier_plot(out, args.plot, title=f"{fields.get('model')} on {fields.get('hardware')}")
        if args.format == "table":
            print(fmt.table(out["points"]))
        else:
            emit(args, out, rows=out["points"])
        return
    out = api.serve(fields)
    emit(args, out, rows=[_flat(out)], kv=_flat(out))


def _flat(d, prefix=""):
    """Nested keys as ``a.b`` for tables and CSV (lists, the sampled timeline, only in JSON)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, list):           # the timeline's series: JSON only
            continue
        elif isinstance(v, float) and math.isinf(v):
            out[f"{prefix}{k}"] = "inf"
        else:
            out[f"{prefix}{k}"] = v
    return out
