"""``costmodel probe``: measure this machine's bandwidth and FLOP/s and write a hardware YAML."""

from __future__ import annotations


def cmd_probe(args):
    from costmodel.cli.main import emit
    from costmodel.analysis.probe import probe
    res = probe(args.output, quick=args.quick, device=args.device, hw_id=args.id)
    m = res["measured"]
    row = {"device": m["name"], "bandwidth_GB_per_s": m["bandwidth"] / 1e9,
           "matrix_fp16_TFLOP_per_s": m["matrix_fp16"] / 1e12, "matrix_fp32_TFLOP_per_s": m["matrix_fp32"] / 1e12,
           "vector_GFLOP_per_s": m["vector"] / 1e9, "cache_MB": m["l2_bytes"] / 1e6,
           "cache_bandwidth_GB_per_s": m["l2_bandwidth"] / 1e9, "dispatch_us": m["launch"] * 1e6,
           "memory_GB": m["capacity"] / 1e9, "usable_GB": m["usable"] / 1e9, "seconds": res["seconds"],
           "output": res["output"] or ""}
    if args.format == "json":
        emit(args, res)
    elif args.format == "csv":
        emit(args, row, rows=[row])
    else:
        w = max(len(k) for k in row)
        for k, v in row.items():
            print(f"{k.ljust(w)}  {v:.4g}" if isinstance(v, float) else f"{k.ljust(w)}  {v}")
        print(f"\ntrust: {res['trust']}")
        if res["output"]:
            print(f"\nuse it: costmodel eval hardware={res['output']} model=... batch_size=... prompt_len=...")


def register(sub, common):
    p = sub.add_parser("probe", parents=[common], help="measure this machine (bandwidth, FLOP/s) and write a "
                                                       "hardware YAML",
                       description="A quick local profile: numpy on the CPU, PyTorch on a GPU when installed. "
                                   "The YAML it writes works wherever hardware= takes a path.")
    p.add_argument("--output", "-o", default="probed-hardware.yaml", metavar="FILE.yaml",
                   help="where to write the hardware YAML (default probed-hardware.yaml)")
    p.add_argument("--quick", action="store_true",
                   help="smaller arrays, fewer repetitions (about a second); less trustworthy: the output says how "
                        "far, and a full probe takes a few seconds")
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--id", default="probed", help="the id written into the file (default probed)")
    p.set_defaults(func=cmd_probe)
