"""Sweep throughput, single-evaluate latency and peak memory, against llm-analysis in the same run.

    python benchmarks/bench_sweep.py            # or: make bench
    python benchmarks/bench_sweep.py --rows 100000 --profile

What it measures (issue 6 goals: ≥ 500× llm-analysis per configuration, evaluate() < 1 ms,
peak memory < 2 GB):

* ``costmodel.sweep`` of 1,000,000 rows: batch_size 1..1000 × prompt_len 16..16000 step 16, one
  speculative setup (llama-2-7b target, llama-68m draft, α = 0.7, γ = 4, a100-80gb). Wall time of
  the whole call, DataFrame included; the median of ``--repeat`` runs after a warm-up run.
* one ``costmodel.evaluate(dict)`` including record parsing, specs cached: median of many calls.
* peak memory of the sweep: tracemalloc's peak (numpy buffers and Python objects allocated during
  the call; a separate run, since tracing slows allocation) and the process's peak RSS.
* llm-analysis (``pip install llm-analysis``; not a project dependency): ``LLMAnalysis.inference``
  for llama-2-7b on an A100-SXM-80GB over batch 1..8 × seq_len 16..4000 (configurations it accepts:
  it raises when the KV cache does not fit), logging off; configurations per second, median
  latency, and tracemalloc peak over its loop. It models autoregressive decoding only, so each of
  its configurations is less work than one speculative row here (which also evaluates the draft,
  the prefill of both models and the autoregressive baseline for ``speedup_vs_ar``).

``--profile`` prints the cProfile of one sweep (top functions by internal time).
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import sys
import time
import tracemalloc

SETUP = dict(model="llama-2-7b", hardware="a100-80gb", strategy="speculative", draft_model="llama-68m",
             acceptance_rate=0.7, gamma=4, gen_len=128)


def axes_for(rows: int) -> dict:
    if rows >= 1_000_000:
        return dict(batch_size=range(1, 1001), prompt_len=range(16, 16001, 16))
    side = max(1, int(round(rows ** 0.5)))
    return dict(batch_size=range(1, side + 1), prompt_len=range(16, 16 * side + 1, 16))


def time_sweep(axes: dict, repeat: int) -> tuple[float, int, list]:
    from costmodel import sweep
    df = sweep(SETUP, **axes)                  # warm-up: loads specs, fills caches
    n = len(df)
    del df
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        df = sweep(SETUP, **axes)
        times.append(time.perf_counter() - t)
        del df
    return statistics.median(times), n, times


def traced_peak(fn) -> float:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def time_evaluate(n: int) -> float:
    from costmodel import evaluate
    rec = dict(SETUP, batch_size=8, prompt_len=1024)
    evaluate(rec)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        evaluate(rec)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def llm_analysis_bench(n: int):
    """(configs/s, median latency s, tracemalloc peak bytes) of llm-analysis, or (None, why)."""
    try:
        import logging
        logging.disable(logging.CRITICAL)
        from llm_analysis.analysis import LLMAnalysis
        from llm_analysis.config import (ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name,
                                         get_model_config_by_name)
    except Exception as exc:  # noqa: BLE001 - report whatever stops it
        return None, f"llm-analysis is not importable ({type(exc).__name__}: {exc}); pip install llm-analysis"
    try:
        mc = get_model_config_by_name("NousResearch_Llama-2-7b-hf")   # bundled config: no network
        gc_ = get_gpu_config_by_name("a100-sxm-80gb")
        dc = get_dtype_config_by_name("w16a16e16")
        configs = [(1 + i % 8, 16 * (1 + (i * 7) % 250)) for i in range(n)]

        def one(b, s):
            a = LLMAnalysis(mc, gc_, dc, ParallelismConfig(tp_size=1), flops_efficiency=0.7,
                            hbm_memory_efficiency=0.9)
            return a.inference(batch_size_per_gpu=b, seq_len=s, num_tokens_to_generate=128)

        for b, s in configs[:20]:
            one(b, s)
        lat = []
        t0 = time.perf_counter()
        for b, s in configs:
            t = time.perf_counter()
            one(b, s)
            lat.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        results = []
        peak = traced_peak(lambda: results.extend(one(b, s) for b, s in configs[: min(n, 2000)]))
        return (n / wall, statistics.median(lat), peak), None
    except Exception as exc:  # noqa: BLE001
        return None, f"llm-analysis failed to run: {type(exc).__name__}: {exc}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--evals", type=int, default=3000, help="single evaluate() calls to time")
    ap.add_argument("--peer-configs", type=int, default=3000, help="llm-analysis configurations to time")
    ap.add_argument("--profile", action="store_true", help="print the cProfile of one sweep")
    args = ap.parse_args(argv)

    import numpy as np
    import pandas as pd
    import costmodel
    from costmodel import sweep

    axes = axes_for(args.rows)
    print(f"costmodel {costmodel.__version__}, numpy {np.__version__}, pandas {pd.__version__}, "
          f"python {sys.version.split()[0]}")
    print(f"setup: {SETUP}")
    med, n, times = time_sweep(axes, args.repeat)
    rate = n / med
    print(f"sweep: {n:,} rows in {med:.3f} s (median of {args.repeat}: "
          f"{', '.join(f'{t:.3f}' for t in times)}) -> {rate:,.0f} configs/s, {med / n * 1e9:.0f} ns/config")
    peak = traced_peak(lambda: sweep(SETUP, **axes))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    print(f"sweep peak memory: {peak / 1e9:.3f} GB traced (tracemalloc), process peak RSS {rss / 1e9:.3f} GB")
    ev = time_evaluate(args.evals)
    print(f"evaluate(): median {ev * 1e3:.3f} ms per call over {args.evals} calls (record parsing included, "
          "specs cached)")

    peer, why = llm_analysis_bench(args.peer_configs)
    if peer is None:
        print(f"llm-analysis: not measured: {why}")
    else:
        p_rate, p_lat, p_peak = peer
        print(f"llm-analysis: {p_rate:,.0f} configs/s, median {p_lat * 1e3:.3f} ms per config "
              f"(LLMAnalysis.inference, {args.peer_configs} configs), traced peak {p_peak / 1e6:.1f} MB for "
              f"{min(args.peer_configs, 2000)} configs")
        print(f"ratio, per-configuration speed (sweep vs llm-analysis): {rate / p_rate:,.0f}x  (goal >= 500x)")
        print(f"ratio, single-configuration latency (llm-analysis / evaluate()): {p_lat / ev:.2f}x")
        print(f"llm-analysis extrapolated to {n:,} configs: {n / p_rate:,.0f} s vs {med:.3f} s")
    ok = [("sweep >= 500x llm-analysis per config", peer is not None and rate / peer[0] >= 500),
          ("evaluate() < 1 ms", ev < 1e-3), ("sweep peak memory < 2 GB", peak < 2e9 and rss < 2e9)]
    print("goals: " + "; ".join(f"{name}: {'met' if good else 'NOT met'}" for name, good in ok))

    if args.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        sweep(SETUP, **axes)
        pr.disable()
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
