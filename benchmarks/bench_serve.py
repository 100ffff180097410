"""Serving simulator speed: one hour of Poisson traffic at 50 requests/s (llama-3-8b on one H100,
vLLM runtime, lognormal prompts of mean 512 and outputs of mean 128 tokens), one core.

    python benchmarks/bench_serve.py
"""

import time

import costmodel


def main():
    t0 = time.perf_counter()
    r = costmodel.serve({"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm"},
                        request_rate=50, duration_s=3600, prompt_len_dist="lognormal:512:0.5",
                        gen_len_dist="lognormal:128:0.5", seed=0)
    dt = time.perf_counter() - t0
    print(f"simulated 3600 s, {r['requests_arrived']} requests ({r['requests_completed']} completed) "
          f"in {dt:.2f} s wall; p99 TTFT {r['ttft_s']['p99'] * 1e3:.1f} ms, p50 TPOT "
          f"{r['tpot_s']['p50'] * 1e3:.2f} ms, mean batch {r['mean_running_seqs']:.1f}")


if __name__ == "__main__":
    main()
