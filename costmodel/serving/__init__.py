"""Serving under load: request arrivals, continuous batching, paged KV, SLOs (``costmodel serve``).

    >>> import costmodel
    >>> r = costmodel.serve({"model": "llama-3-8b", "hardware": "h100-sxm", "runtime": "vllm"},
    ...                     request_rate=5, num_requests=50, prompt_len=512, gen_len=64)
    >>> r["requests_completed"]
    50

Modules: workload (fields, arrivals, lengths), stepcost (the engine's step costs, tabulated),
instance (the scheduler of one replica), simulator (router and event loop), metrics (outputs),
search (max rate under SLOs, Pareto frontier), plots. Docs: docs/serving.md.
"""

from __future__ import annotations

from costmodel.serving.api import frontier, max_rate, serve, split_fields

__all__ = ["serve", "max_rate", "frontier", "split_fields"]
