"""Scheduler defaults of SGLang, for deployments that run SGLang's scheduler over a vLLM-class kernel
profile.

The project has no SGLang kernel profile: no SGLang row in the calibration data measures its kernels,
so an SGLang deployment keeps a ``vllm`` runtime (same GEMM libraries, paged/FlashInfer-class attention,
CUDA graphs) and only SGLang's scheduler, which is stated in its source, is applied here. From
``python/sglang/srt/server_args.py`` and ``model_executor/model_runner.py`` of SGLang v0.3 (Sept 2024)
and v0.4 (Jan 2025), the versions the published SGLang load curves ran:

* ``max_running_requests``: not set by default. The request pool holds
  ``max_num_reqs = min(max(int(pool / context_len × 512), 2048), 4096)`` requests (model_runner), and the
  scheduler admits at most ``min(pool // 2, max_num_reqs)`` (``max_total_num_tokens // 2``), with
  ``pool`` the KV pool in tokens and ``context_len`` the model's context. For any pool of at least
  4096 tokens that is 2048…4096: the KV pool, not a sequence limit, stops admission — unlike vLLM's
  ``max_num_seqs = 256``.
* ``enable_mixed_chunk = False``: a prefill batch runs alone, and decoding waits for it
  (``get_next_batch_to_run`` builds a prefill batch first and decodes only when none is ready). The
  simulator's ``chunked_prefill = False`` steps the same way: prompts first, a step holds prompts or
  decoders, never both.
* ``chunked_prefill_size = 8192``: a prefill batch holds at most 8192 prompt tokens
  (``max_num_batched_tokens``). SGLang cuts a longer prompt into 8192-token chunks; the simulator runs
  a prompt longer than the budget whole, alone in its step.

Not priced: the v0.4 overlap ("zero-overhead") scheduler hides host work behind the device pass, which
the current ``vllm`` runtime already does not charge (no host work per scheduler invocation); the
v0.3 scheduler's host work has no published figure.
"""

from __future__ import annotations

#: SGLang server_args.py chunked_prefill_size default (tokens per prefill batch)
SGLANG_CHUNKED_PREFILL_SIZE = 8192
#: SGLang model_runner.py request-pool bounds and the per-context scale
SGLANG_POOL_MIN_REQS, SGLANG_POOL_MAX_REQS, SGLANG_REQS_PER_CONTEXT = 2048, 4096, 512


def sglang_max_running_requests(kv_pool_tokens: int, context_len: int) -> int:
    """SGLang's default running-request limit:
    min(pool // 2, min(max(int(pool / context_len × 512), 2048), 4096)) (module docstring)."""
    pool, ctx = int(kv_pool_tokens), int(context_len)
    max_num_reqs = min(max(int(pool / ctx * SGLANG_REQS_PER_CONTEXT), SGLANG_POOL_MIN_REQS), SGLANG_POOL_MAX_REQS)
    return max(1, min(pool // 2, max_num_reqs))


def sglang_scheduler(kv_pool_tokens: int, context_len: int) -> dict:
    """The workload's scheduler fields for SGLang's defaults (module docstring)."""
    return {"max_num_seqs": sglang_max_running_requests(kv_pool_tokens, context_len),
            "chunked_prefill": False, "max_num_batched_tokens": SGLANG_CHUNKED_PREFILL_SIZE}
