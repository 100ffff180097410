"""``costmodel plan KEY=VALUE ... target_time_per_output_token_s=0.030`` — capacity planning.

Leave out ``n_devices`` to search the fewest devices, ``batch_size`` to search the largest batch;
give several hardware ids (``hardware=a100-80gb,h100-sxm``) or ``--prices FILE`` to pick the cheapest.
Rules and outputs: :mod:`costmodel.plan`.
"""

from __future__ import annotations

from costmodel.cli import format as fmt
from costmodel.cli.main import emit, parse_kv

CANDIDATE_COLUMNS = (
    ("n_devices", "dev", None, "{:.0f}"),
    ("tensor_parallel", "TP", None, "{:.0f}"),
    ("pipeline_parallel", "PP", None, "{:.0f}"),
    ("batch_size", "batch", None, "{}"),
    ("time_per_output_token_s", "TPOT ms", 1e3, "{:.2f}"),
    ("tokens_per_s", "tok/s", 1, "{:.1f}"),
    ("peak_device_memory_bytes", "peak GB", 1e-9, "{:.2f}"),
    ("fits", "fits", None, "{}"),
    ("meets_target", "meets", None, "{}"),
    ("bound", "bound", None, "{}"),
    ("why_not", "fails on", None, "{}"),
)
LOAD_COLUMNS = (
    ("hardware", "hardware", None, "{}"),
    ("tensor_parallel", "TP", None, "{:.0f}"),
    ("strategy", "strategy", None, "{}"),
    ("gamma", "γ", None, "{}"),
    ("draft_placement", "draft at", None, "{}"),
    ("max_rate_per_replica", "req/s per replica", 1, "{:.3g}"),
    ("replicas", "replicas", None, "{}"),
    ("n_devices_total", "devices", None, "{}"),
    ("binding_constraint", "bound by", None, "{}"),
)
OPTION_COLUMNS = (("hardware", "hardware", None, "{}"),) + CANDIDATE_COLUMNS[:5] + (
    ("feasible", "feasible", None, "{}"),
    ("cost_per_hour", "cost/h", 1, "{:.2f}"),
    ("cost_per_million_tokens", "cost/1M tok", 1, "{:.3f}"),
    ("binding_constraint", "binding", None, "{}"),
)


def register(subparsers, common):
    p = subparsers.add_parser(
        "plan", parents=[common],
        help="capacity planning: fewest devices / largest batch that fit and meet a target; cheapest hardware",
        description="Capacity planning. Targets: target_time_per_output_token_s, target_step_latency_s, "
                    "target_ttft_s, target_e2e_latency_s (upper bounds); target_tokens_per_s (aggregate), "
                    "target_tokens_per_s_per_seq (lower bounds). Leave out n_devices to search device "
                    "counts (TP, TP×PP), batch_size to search the largest batch; several hardware ids "
                    "(comma-separated) or --prices to pick the cheapest. Under load: request_rate=R with "
                    "slo_ttft_s / slo_tpot_s (and workload fields as for serve) answers replicas × TP × "
                    "strategy.")
    p.add_argument("fields", nargs="+", metavar="KEY=VALUE")
    p.add_argument("--prices", metavar="PRICES.yaml", help="prices per device-hour (see scenarios/prices_example.yaml)")
    p.add_argument("--max-devices", type=int, default=None, help="largest device count tried (default 64)")
    p.add_argument("--max-batch", type=int, default=None, help="largest batch tried (default 1024)")
    p.add_argument("--margin", nargs="?", const="band", default=None, metavar="FRACTION",
                   help="plan with headroom for the model's error: alone, the validation error band of each "
                        "target's metric (validation/error_band.yaml); or a fraction, e.g. 0.2: latency "
                        "targets become T·(1−m), throughput targets T·(1+m)")
    p.add_argument("--parallelism", choices=("tp", "tp_pp"), default=None,
                   help="tp: tensor parallel only; tp_pp (default): also tensor × pipeline parallel")
    p.set_defaults(func=run)


def run(args):
    from costmodel.analysis.plan import plan
    fields = parse_kv(args.fields)
    out = plan(fields, prices=args.prices, max_devices=args.max_devices, max_batch=args.max_batch,
               parallelism=args.parallelism, margin=args.margin)
    if args.format == "table" and "request_rate" in out:
        print(fmt.key_value_table({k: v for k, v in out.items() if not isinstance(v, (list, dict))}))
        for k, v in (out.get("verified") or {}).items():
            print(f"verified.{k}  {v}")
        print("\nconfigurations tried (one replica each):")
        print(fmt.table(out["candidates"], LOAD_COLUMNS))
        return
    if args.format == "table":
        print(fmt.key_value_table({k: v for k, v in out.items() if not isinstance(v, (list, dict))}))
        for k, v in out.get("targets", {}).items():
            m = out.get("margin", {}).get(k)
            print(f"{k}  {v:g}" + (f"  (planned for {out['targets_with_margin'][k]:g}: margin {m:.0%})"
                                   if m is not None else ""))
        if out.get("options"):
            print("\nhardware options (best first):")
            print(fmt.table(out["options"], OPTION_COLUMNS))
        print("\nconfigurations tried:")
        print(fmt.table(out["candidates"], CANDIDATE_COLUMNS))
    else:
        row = {k: v for k, v in out.items() if not isinstance(v, (list, dict))}
        emit(args, out, rows=[row])
