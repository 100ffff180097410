"""Compare ``costmodel serve`` with the published load-curve points in validation/load_curves.csv.

    python validation/serve_load_curves.py [--max-requests N]

Every row is predicted with the model as it stands (no parameter is fitted to these rows, so every
error is held out). A row whose model, hardware or workload the model cannot take is listed as
skipped with the reason. Prints per-row errors and the median / p90 absolute relative error by metric.
"""

import argparse
import math
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import costmodel  # noqa: E402
from costmodel.errors import InputError  # noqa: E402

RECORD_COLS = ("model", "hardware", "n_devices", "tensor_parallel", "runtime", "weight_dtype", "strategy",
               "draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens")
WORKLOAD_COLS = ("prompt_len", "gen_len", "prompt_len_dist", "gen_len_dist", "request_rate", "max_concurrency",
                 "num_requests", "max_num_seqs")


def predict(row, max_requests):
    rec = {c: row[c] for c in RECORD_COLS if c in row and not pd.isna(row[c])}
    for c in ("n_devices", "tensor_parallel", "gamma"):
        if c in rec:
            rec[c] = int(rec[c])
    wl = {c: row[c] for c in WORKLOAD_COLS if c in row and not pd.isna(row[c])}
    for c in ("prompt_len", "gen_len", "max_concurrency", "num_requests", "max_num_seqs"):
        if c in wl:
            wl[c] = int(wl[c])
    arrival = row.get("arrival")
    if arrival == "all_at_once" or (arrival == "closed_loop" and "request_rate" not in wl):
        wl["request_rate"] = math.inf
    n = wl.get("num_requests") or max(200, 4 * wl.get("max_concurrency", 0))
    wl["num_requests"] = int(min(n, max_requests))
    res = costmodel.serve(rec, **wl)
    metric = row["metric"]
    for stat in ("mean", "p50", "p90", "p99"):
        if metric.endswith("_" + stat):
            base = metric[: -len(stat) - 1]
            return res["tpot_s" if base == "itl_s" else base][stat]
    return res[metric]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-requests", type=int, default=500)
    ap.add_argument("--csv", default=os.path.join(os.path.dirname(__file__), "load_curves.csv"))
    args = ap.parse_args()
    d = pd.read_csv(args.csv)
    rows, skipped = [], []
    for _, row in d.iterrows():
        try:
            p = predict(row, args.max_requests)
        except InputError as exc:
            skipped.append((row["id"], str(exc)[:100]))
            continue
        rows.append({"id": row["id"], "publication": row["publication"], "metric": row["metric"],
                     "measured": row["value"], "predicted": p, "rel_error": p / row["value"] - 1.0})
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 160)
    if len(out):
        out["abs"] = out.rel_error.abs()
        print(out.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        print("\nby metric:")
        print(out.groupby("metric")["abs"].agg(["count", "median", lambda s: s.quantile(0.9)]).to_string())
        print(f"\nall: n={len(out)} median |rel err| {out['abs'].median():.3f}, p90 {out['abs'].quantile(0.9):.3f}")
    print(f"skipped {len(skipped)} rows")
    for i, why in skipped[:20]:
        print(f"  {i}: {why}")


if __name__ == "__main__":
    main()
