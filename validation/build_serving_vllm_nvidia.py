"""vLLM static-batch latency rows on named NVIDIA GPUs for ``measurements_serving.csv`` (VS193-VS198),
called by ``build_measurements_serving.py``; every number is read from the document named in its
table's ``SRC`` entry."""

from __future__ import annotations


# ---------------------------------------------------------------------------------------------------
# vLLM on named NVIDIA GPUs, static batch (benchmark_latency.py: one batch of B identical-length dummy
# prompts, prefill + gen_len decode steps; the figure is the mean end-to-end latency of that batch).
# -> metric e2e_latency_s.
#
# (1) vllm-project/vllm PR #2192 'Custom all reduce kernels' (hanzhi713, 2023-12-19; merged 2024-01-27,
# between v0.2.7 and v0.3.0): benchmark_latency with input 256 / output 256, '--num-iters 5', columns
# 'L before (s)' (NCCL all-reduce) and 'L after (s)' (the PR's custom all-reduce, vLLM's default since).
# Only the 'after' column is a row, pinned to allreduce_algorithm custom (the kernel it measures,
# whatever the profile's default); the 'before' (NCCL) latency could only be expressed by pinning ring
# or tree, which NCCL's tuner chooses per message and the PR does not report; the 'before' values are
# kept in the notes.
# Engine: V0 with CUDA graphs (PR 1926, v0.2.6), offline LLM class (no API server) -> runtime vllm@0.6, the
# V0 profile whose host work is scheduling and input preparation (3.8 ms a step) plus per-sequence output
# processing, without the HTTP server of vllm@0.5.
# Models: 'Llama 70B' = Llama-2-70B (the only 70B Llama in Dec 2023); 'Llama 33B' = LLaMA-1 33B (the
# vicuna-33b spec has its architecture); 'Llama 7B' = Llama-2-7B architecture (LLaMA-1 7B is identical
# but for its 2048-token context, which 512 tokens do not reach). fp16 (vLLM's 'auto' dtype for these
# float16 checkpoints; fp16 KV cache). The A30 row ('Llama 13B', 'A30 (no nvlink)') is left out: no A30
# hardware file.
SRC_VLLM2192 = dict(
    source="vllm-project/vllm PR #2192 'Custom all reduce kernels' (hanzhi713, 2023-12-19), description, "
           "'## Latency and memory' (benchmark_latency.py --input-len 256 --output-len 256 --num-iters 5)",
    publication="vllm-pr-2192-custom-allreduce")
# (model label, zoo model, hardware, hardware note, tp, batch, latency before s (NCCL), latency after s (custom))
VLLM2192 = [
    ("Llama 70B", "llama-2-70b", "a100-80gb", "A100-80G", "A100 SXM4 80GB assumed (the PR says 'A100-80G'; "
     "TP4 over NVLink/NVSwitch, the fabric the custom all-reduce needs above two GPUs)", 4, 64, 16.37, 14.57),
    ("Llama 33B", "vicuna-33b", "a100-80gb", "A100-80G", "A100 SXM4 80GB assumed (the PR says 'A100-80G'), TP2",
     2, 64, 15.88, 14.38),
    ("Llama 7B", "llama-2-7b", "t4", "T4", "two T4 16GB over PCIe (no NVLink; the custom all-reduce runs on "
     "two PCIe GPUs with peer access)", 2, 32, 17.90, 17.51),
]


def vllm_pr2192_rows(add, fmt):
    """Add the PR 2192 rows through the builder's ``add`` (``fmt``: its number format)."""
    for label, model, hw, gpu, hw_note, tp, b, before, after in VLLM2192:
        add(source_group="vllm-pr2192-latency", metric="e2e_latency_s", value=fmt(after), model=model,
            hardware=hw, n_devices=tp, weight_dtype="fp16", kv_dtype="fp16", runtime="vllm@0.6", batch_size=b,
            prompt_len=256, gen_len=256, strategy="autoregressive", allreduce_algorithm="custom",
            source_locator=(f"github vllm-project/vllm PR #2192, description, table 'Latency and memory', row "
                            f"{label} / {gpu} / TP {tp} / BS {b}, column 'L after (s)'"),
            reliability="table value (PR description)",
            notes=(f"vLLM benchmark_latency.py at the PR branch (V0 engine, CUDA graphs, offline LLM class): one "
                   f"batch of {b} prompts of 256 tokens, 256 output tokens, mean of 5 iterations; the PR's custom "
                   f"all-reduce (allreduce_algorithm custom); the same table gives "
                   f"{before} s with NCCL ('L before (s)'), not a row (see the builder); {hw_note}; "
                   f"'{label}' mapped to {model}; fp16 weights and KV cache (vLLM dtype 'auto' of the "
                   "float16 checkpoints)"),
            **SRC_VLLM2192)


# (2) vLLM's CI performance benchmark (buildkite pipeline vllm/performance-benchmark, build 9515, the
# 'Latency tests' table): 'Input length: 32 tokens. Output length: 128 tokens. Batch size: fixed (8).
# Models: llama-3.1 8B, llama-3 70B, mixtral 8x7B. Evaluation metrics: end-to-end latency (mean, median,
# p99)'; GPU column H200. Test names latency_llama8B_tp1 / latency_llama70B_tp4 / latency_mixtral8x7B_tp2
# give the TP size. The page does not state the vLLM version: runtime vllm (the current V1 profile)
# assumed; bf16 (the checkpoints' dtype, vLLM's 'auto') assumed, KV cache bf16.
# calibrate=no: the engine version is not stated, and V0 (vllm@0.6: 3.8 ms of host work per scheduler
# step) against V1 is the size of the step overhead these rows would teach the profile; predicted and
# reported, not fitted (as the EAGLE rows whose GPU is inferred)
SRC_VLLMCI = dict(
    calibrate="no",
    source="vLLM CI performance benchmark, buildkite vllm/performance-benchmark build 9515, 'Latency tests' "
           "(benchmark_latency: input 32, output 128, batch 8; end-to-end latency)",
    publication="vllm-ci-perf-benchmark-9515")
VLLMCI = [("latency_llama8B_tp1", "llama-3.1-8b", 1, 833.421), ("latency_llama70B_tp4", "llama-3-70b", 4, 2077.53),
          ("latency_mixtral8x7B_tp2", "mixtral-8x7b", 2, 1917.44)]


def vllm_ci_rows(add, fmt):
    """Add the vLLM CI H200 rows through the builder's ``add``."""
    for test, model, tp, ms in VLLMCI:
        add(source_group="vllm-ci-latency-h200", metric="e2e_latency_s", value=fmt(ms / 1000.0), model=model,
            hardware="h200", n_devices=tp, weight_dtype="bf16", kv_dtype="bf16", runtime="vllm", batch_size=8,
            prompt_len=32, gen_len=128, strategy="autoregressive",
            source_locator=("https://buildkite.com/vllm/performance-benchmark/builds/9515, 'Latency tests' table, "
                            f"row '{test} | H200', column 'Mean latency (ms)'"),
            reliability="table value (CI benchmark page)",
            notes=(f"mean latency {ms} ms of one batch of 8 requests, 32 prompt and 128 output tokens (the "
                   "table's workload description); H200 SXM 141GB, TP over NVLink/NVSwitch; model per the "
                   "description ('llama-3.1 8B, llama-3 70B, mixtral 8x7B'); vLLM version not stated on the "
                   "page: the current V1 profile assumed; bf16 weights and KV cache assumed (the checkpoints' "
                   "dtype)"),
            **SRC_VLLMCI)

