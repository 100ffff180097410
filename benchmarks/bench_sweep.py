"""Sweep throughput, single-evaluate latency and peak memory, against llm-analysis in the same run.

    python benchmarks/bench_sweep.py            # or: make bench
    python benchmarks/bench_sweep.py --rows 100000 --profile

What it measures (the project's goals: ≥ 500× llm-analysis per configuration, evaluate() < 1 ms,
peak memory < 2 GB):

* ``costmodel.sweep`` of 1,000,000 rows: batch_size 1..1000 × prompt_len 16..16000 step 16, one
  speculative setup (llama-2-7b-32k target: llama-2-7b with a 32K context, so that prompts up to
  16,000 tokens are within its max_context; llama-68m draft, α = 0.7, γ = 4, a100-80gb). Wall time of
  the whole call, DataFrame included; the median of ``--repeat`` runs after a warm-up run.
* one ``costmodel.evaluate(dict)`` including record parsing, specs cached: median of many calls.
* peak memory of the sweep: tracemalloc's peak (numpy buffers and Python objects allocated during
  the call; a separate run, since tracing slows allocation) and the process's peak RSS.
* llm-analysis (``pip install llm-analysis``; not a project dependency): ``LLMAnalysis.inference``
  for llama-2-7b on an A100-SXM-80GB over batch 1..8 × seq_len 16..4000 (configurations it accepts:
  it raises when the KV cache does not fit), one LLMAnalysis object, logging off; configurations per
  second (its throughput: the ratio's denominator; the best of five windows of its loop), median
  latency, and tracemalloc peak over its loop. It models autoregressive decoding only, so each of
  its configurations is less work than one speculative row here (which also evaluates the draft,
  the prefill of both models and the autoregressive baseline for ``speedup_vs_ar``); an
  autoregressive sweep of the same grid is timed too, for a like-for-like ratio.
* the sweep is timed with 1 worker (this process alone) and with the default worker count (the CPU
  count, at most 8: forked processes writing into shared columns, ``costmodel.fast.sweep_fork``).

``--profile`` prints the cProfile of one sweep (top functions by internal time).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import sys
import time
import tracemalloc

SETUP = dict(model="llama-2-7b-32k", hardware="a100-80gb", strategy="speculative", draft_model="llama-68m",
             acceptance_rate=0.7, gamma=4, gen_len=128)


def axes_for(rows: int) -> dict:
    if rows >= 1_000_000:
        return dict(batch_size=range(1, 1001), prompt_len=range(16, 16001, 16))
    side = max(1, int(round(rows ** 0.5)))
    return dict(batch_size=range(1, side + 1), prompt_len=range(16, 16 * side + 1, 16))


AR_SETUP = dict(model="llama-2-7b-32k", hardware="a100-80gb", gen_len=128)   # llm-analysis' kind of config


def time_sweep(axes: dict, repeat: int, workers=None, setup=SETUP) -> tuple[float, int, list]:
    from costmodel import sweep
    df = sweep(setup, workers=workers, **axes)   # warm-up: loads specs, fills caches
    n = len(df)
    del df
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        df = sweep(setup, workers=workers, **axes)
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


def time_evaluate(n: int, setup=SETUP) -> float:
    from costmodel import evaluate
    rec = dict(setup, batch_size=8, prompt_len=1024)
    evaluate(rec)
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        evaluate(rec)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def llm_analysis_bench(n: int, windows: int = 5):
    """(configs/s, median latency s, tracemalloc peak bytes) of llm-analysis, or (None, why). Its
    rate is the best of ``windows`` equal windows of its loop over ``n`` configurations, as
    costmodel's figures are the best of several runs: on a shared machine a burst of other work
    slows one window, not the figure."""
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

        ana = LLMAnalysis(mc, gc_, dc, ParallelismConfig(tp_size=1), flops_efficiency=0.7,
                          hbm_memory_efficiency=0.9)

        def one(b, s):
            return ana.inference(batch_size_per_gpu=b, seq_len=s, num_tokens_to_generate=128)

        for b, s in configs[:20]:
            one(b, s)
        lat = []
        size = max(1, n // max(1, windows))
        best = None
        for w in range(0, n - size + 1, size):
            t0 = time.perf_counter()
            for b, s in configs[w:w + size]:
                t = time.perf_counter()
                one(b, s)
                lat.append(time.perf_counter() - t)
            rate = size / (time.perf_counter() - t0)
            best = rate if best is None else max(best, rate)
        results = []
        peak = traced_peak(lambda: results.extend(one(b, s) for b, s in configs[: min(n, 2000)]))
        return (best, statistics.median(lat), peak), None
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
    from costmodel.analysis.sweep import _workers
    nthreads = _workers(None)
    results = {}
    for w in sorted({1, nthreads}):
        med, n, times = time_sweep(axes, args.repeat, workers=w)
        results[w] = n / med
        print(f"sweep, {w} worker{'s' if w > 1 else ''}: {n:,} rows in {med:.3f} s (median of {args.repeat}: "
              f"{', '.join(f'{t:.3f}' for t in times)}) -> {n / med:,.0f} configs/s, {med / n * 1e9:.0f} ns/config")
    rate = results[nthreads]
    rate1 = results[1]
    peak = traced_peak(lambda: sweep(SETUP, workers=1, **axes))
    unit = 1 if sys.platform == "darwin" else 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    rss_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * unit
    print(f"sweep peak memory: {peak / 1e9:.3f} GB traced (tracemalloc, 1 worker), process peak RSS "
          f"{rss / 1e9:.3f} GB (whole run so far), largest worker process {rss_child / 1e9:.3f} GB "
          f"(the sum, {(rss + rss_child) / 1e9:.3f} GB, counts the shared output columns twice)")
    med_ar, n_ar, _ = time_sweep(axes, args.repeat, workers=1, setup=AR_SETUP)
    rate_ar = n_ar / med_ar
    print(f"sweep, autoregressive setup (like llm-analysis), 1 worker: {n_ar:,} rows in {med_ar:.3f} s -> "
          f"{rate_ar:,.0f} configs/s")
    ev = time_evaluate(args.evals)
    ev_ar = time_evaluate(args.evals, AR_SETUP)
    print(f"evaluate(): median {ev * 1e3:.3f} ms per call (speculative setup), {ev_ar * 1e3:.3f} ms "
          f"(autoregressive) over {args.evals} calls each (record parsing included, specs cached)")

    peer, why = llm_analysis_bench(args.peer_configs)
    if peer is None:
        print(f"llm-analysis: not measured: {why}")
    else:
        p_rate, p_lat, p_peak = peer
        print(f"llm-analysis: {p_rate:,.0f} configs/s (mean {1e3 / p_rate:.3f} ms), median {p_lat * 1e3:.3f} ms "
              f"per config (LLMAnalysis.inference, {args.peer_configs} configs), traced peak "
              f"{p_peak / 1e6:.1f} MB for {min(args.peer_configs, 2000)} configs")
        print(f"ratio, per-configuration speed (sweep vs llm-analysis): {rate / p_rate:,.0f}x with {nthreads} "
              f"worker{'s' if nthreads > 1 else ''} ({os.cpu_count()} CPUs), {rate1 / p_rate:,.0f}x with 1 worker "
              "(goal >= 500x)")
        print(f"ratio vs llm-analysis' median latency instead of its throughput: {rate * p_lat:,.0f}x "
              f"({rate1 * p_lat:,.0f}x with 1 worker)")
        print(f"ratio, autoregressive sweep (the same kind of configuration) vs llm-analysis: "
              f"{rate_ar / p_rate:,.0f}x with 1 worker")
        print(f"ratio, single-configuration latency (llm-analysis / evaluate()): {p_lat / ev:.2f}x speculative, "
              f"{p_lat / ev_ar:.2f}x autoregressive")
        print(f"llm-analysis extrapolated to {n:,} configs: {n / p_rate:,.0f} s vs {n / rate:.3f} s")
    ok = [("sweep >= 500x llm-analysis per config", peer is not None and rate / peer[0] >= 500),
          ("1-worker sweep >= 500x", peer is not None and rate1 / peer[0] >= 500),
          ("evaluate() < 1 ms", ev < 1e-3), ("sweep peak memory < 2 GB", peak < 2e9 and rss + rss_child < 2e9)]
    print("goals: " + "; ".join(f"{name}: {'met' if good else 'NOT met'}" for name, good in ok))

    if args.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        sweep(SETUP, workers=1, **axes)
        pr.disable()
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
