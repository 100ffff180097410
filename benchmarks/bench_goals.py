"""Every sweep goal as a ratio against llm-analysis measured in the same run (best of N).

    python benchmarks/bench_goals.py [--rows 1000000] [--repeat 3] [--big-rows 10000000] [--only capacity]
                                     [--only tree_sweep,speculative,two_workers]

Rows of the table (each figure is costmodel's speed over llm-analysis' ``LLMAnalysis.inference``
per configuration, measured here, see bench_sweep.llm_analysis_bench: its rate the best of five
windows of 600 configurations; noisy on a shared machine, so costmodel's are the best of
``--repeat`` runs, of 4·``--repeat`` for the ~30 ms capacity grid and 5·``--repeat`` for the tree
search, so that each side samples for a comparable time):

* 1 M-row sweeps (batch 1..1000 × prompt 16..16000) of llama-2-7b-32k (llama-2-7b's architecture
  with a 32K context, so that every prompt is within its max_context): autoregressive,
  speculative, shared-prefix and tree decoding, one worker, and the speculative sweep with two
  workers over one;
* the capacity-planning grid: 16 GPUs × 5 models × 2 strategies × 3 dtypes × 4 device counts ×
  9 batches × 3 prompts = 51,840 rows (``on_invalid="mark"``: a model that does not split over 8
  devices is marked, not fatal), per row;
* ``tree_shape=optimal_for_hardware``: milliseconds per evaluate() (goal < 10 ms);
* with ``--big-rows``: the CLI writing that many rows to Parquet, its wall time and peak RSS
  (goal < 1 GB), as a child process.

``--only sweeps|capacity|tree`` runs that row (or rows) alone, with llm-analysis measured as always;
several, comma-separated, run together, and a single 1 M-row sweep is named by its setup
(``autoregressive``, ``speculative``, ``shared_prefix``, ``tree_sweep``; ``two_workers`` adds the
speculative sweep with two workers): ``--only tree_sweep,speculative``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench_sweep import axes_for, llm_analysis_bench  # noqa: E402

SETUPS = {
    "autoregressive": dict(model="llama-2-7b-32k", hardware="a100-80gb", gen_len=128),
    "speculative": dict(model="llama-2-7b-32k", hardware="a100-80gb", strategy="speculative", draft_model="llama-68m",
                        acceptance_rate=0.7, gamma=4, gen_len=128),
    "shared_prefix": dict(model="llama-2-7b-32k", hardware="a100-80gb", strategy="shared_prefix", n_branches=4,
                          shared_prefix_len=0, gen_len=128),
    "tree": dict(model="llama-2-7b-32k", hardware="a100-80gb", strategy="tree", draft_model="llama-68m",
                 acceptance_rate=0.7, tree_nodes=32, tree_depth=5, gen_len=128),
}
GPUS = ["a100-80gb", "a100-40gb", "h100-sxm", "h100-pcie", "h200", "l4", "l40s", "a10g", "t4", "v100",
        "rtx-4090", "mi300x", "b200", "h20", "a40", "rtx-5090"]
CAPACITY = dict(hardware=GPUS, model=["llama-2-7b", "llama-2-13b", "llama-3-8b", "mistral-7b", "llama-68m"],
                strategy=["autoregressive", "speculative"], weight_dtype=["fp16", "int8", "int4"],
                n_devices=[1, 2, 4, 8], batch_size=[1, 2, 4, 8, 16, 32, 64, 128, 256], prompt_len=[128, 1024, 4096])
TREE_SEARCH = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=4, prompt_len=512, strategy="tree",
                   draft_model="llama-68m", tree_nodes=32, acceptance_rate=0.7, tree_shape="optimal_for_hardware")


ONLY = ("sweeps", "capacity", "tree")
#: names of single 1 M-row sweeps for --only (the tree sweep's: "tree" is the tree search's row)
SWEEP_ROWS = {"autoregressive": "autoregressive", "speculative": "speculative", "shared_prefix": "shared_prefix",
              "tree_sweep": "tree", "two_workers": None}


def best_time(fn, repeat: int) -> float:
    fn()                                   # warm-up: specs, caches
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peer-configs", type=int, default=3000)
    ap.add_argument("--big-rows", type=int, default=0, help="also time the CLI writing this many rows to Parquet")
    ap.add_argument("--only", help="run only these rows, comma-separated: " + ", ".join(ONLY) + " (the 1 M-row "
                                   "sweeps, the capacity grid, the tree search) or single sweeps: "
                                   + ", ".join(SWEEP_ROWS))
    args = ap.parse_args(argv)
    only = set(ONLY) if args.only is None else set(args.only.split(","))
    if not only <= set(ONLY) | set(SWEEP_ROWS):
        ap.error(f"--only: unknown row(s) {', '.join(sorted(only - set(ONLY) - set(SWEEP_ROWS)))}")
    sweeps = set(SETUPS) | {"two_workers"} if "sweeps" in only else \
        {SWEEP_ROWS[r] for r in only if r in SWEEP_ROWS and SWEEP_ROWS[r]} | ({"two_workers"} & only)
    from costmodel import evaluate, sweep

    peer, why = llm_analysis_bench(args.peer_configs)
    if peer is None:
        print(f"llm-analysis: not measured ({why}); figures below are absolute only")
        p_rate = None
    else:
        p_rate = peer[0]
        print(f"llm-analysis: {p_rate:,.0f} configurations/s ({1e6 / p_rate:.0f} µs each), this run")
    rows = []

    def ratio(rate):
        if p_rate is None:
            return "n/a"
        r = rate / p_rate
        return f"{r:,.0f}x" if r >= 10 else f"{r:.2f}x"

    axes = axes_for(args.rows)
    n = 1
    for v in axes.values():
        n *= len(v)
    for name, setup in SETUPS.items():
        if name not in sweeps and not (name == "speculative" and "two_workers" in sweeps):
            continue
        t = best_time(lambda: sweep(setup, workers=1, **axes), args.repeat)
        rows.append((f"{n:,}-row sweep, {name}, 1 worker", f"{n / t:,.0f} rows/s", ratio(n / t), ">= 1000x"))
        if name == "speculative" and "two_workers" in sweeps:
            t2 = best_time(lambda: sweep(setup, workers=2, **axes), args.repeat)
            rows.append((f"{n:,}-row sweep, {name}, 2 workers", f"{n / t2:,.0f} rows/s ({t / t2:.2f}x one worker)",
                         ratio(n / t2), ">= 1.6x one worker"))
    ncap = 1
    for v in CAPACITY.values():
        ncap *= len(v)
    base = dict(draft_model="llama-68m", acceptance_rate=0.7, gamma=4)
    if "capacity" in only:
        # a grid takes ~30 ms: the best of 4·repeat runs samples about as long as llm-analysis' five
        # windows of 600 configurations (~0.6 s), so a slow stretch of the host weighs on both alike
        t = best_time(lambda: sweep(base, workers=1, on_invalid="mark", **CAPACITY), 4 * args.repeat)
        rows.append((f"capacity grid, {ncap:,} rows, 1 worker",
                     f"{ncap / t:,.0f} rows/s ({t * 1e6 / ncap:.1f} µs/row, {t * 1e3:.1f} ms)", ratio(ncap / t),
                     ">= 300x"))
    if "tree" in only:
        t = best_time(lambda: evaluate(TREE_SEARCH), 5 * args.repeat)
        rows.append(("tree_shape=optimal_for_hardware, 32 nodes", f"{t * 1e3:.2f} ms per evaluate()",
                     ratio(1.0 / t), "< 10 ms"))
    if args.big_rows:
        side = int(args.big_rows ** 0.5)
        n_prompts = args.big_rows // side
        # prompts from 16 tokens to within the model's 32,768-token context (with 128 generated)
        step = max(1, (32768 - 128 - 16) // max(n_prompts - 1, 1))
        out = "bench_big.parquet"
        cmd = [sys.executable, "-m", "costmodel", "sweep", *(f"{k}={v}" for k, v in SETUPS["speculative"].items()),
               f"batch_size=1:{side}", f"prompt_len=16:{16 + step * (n_prompts - 1)}:{step}", "--output", out,
               "--no-progress"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        t = time.perf_counter() - t0
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        os.remove(out)
        rows.append((f"CLI -> Parquet, {args.big_rows:,} rows", f"{t:.1f} s, peak RSS {rss / 1e9:.2f} GB",
                     ratio(args.big_rows / t), "< 1 GB"))
    w = max(len(r[0]) for r in rows)
    print(f"{'measure':<{w}}  {'costmodel':<40}  {'vs llm-analysis':>15}  goal")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:<40}  {r[2]:>15}  {r[3]}")


if __name__ == "__main__":
    main()
