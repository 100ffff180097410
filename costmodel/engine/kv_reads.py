"""KV bytes an attention kernel re-reads: the L2 share of re-reads and the extra reads of kernels that do
not share a grouped-query KV head among its query heads. Functions of an ``ops.Exec`` (``ex``); no
import of the operators, so that ``ops`` and the strategies both use them."""

from __future__ import annotations

import numpy as np


def l2_hit_fraction(ex, context_tokens) -> np.ndarray:
    """Share of re-reads of one layer's context KV served by L2: min(1, L2 bytes / working set),
    the working set being ``context_tokens`` (summed over the batch) of that layer's KV."""
    ws = np.asarray(context_tokens, dtype=float) * ex.kv_bytes_per_token_layer
    return np.minimum(1.0, ex.hw.l2_bytes / np.maximum(ws, 1.0))


def gqa_extra_bytes(ex, kv_read_tokens):
    """(extra HBM bytes, L2 bytes) per layer of an attention kernel that does not share a KV head among
    its r = (heads/tp)/(KV heads per device) query heads (``Runtime.gqa_attention``), for
    ``kv_read_tokens`` KV tokens read (K = the bytes of those tokens' KV on the device,
    h = :func:`l2_hit_fraction` of the re-read set):

        per_query_head: r − 1 re-reads of K:   HBM (r − 1)·K·(1 − h), L2 (r − 1)·K·h, h over K
        repeat_kv:      r copies written, then read:  HBM r·K + r·K·(1 − h), L2 r·K·h, h over r·K

    A ``grouped`` kernel that exists only for some r (``Runtime.gqa_grouped_group_sizes``) leaves the
    other r to the ``per_query_head`` kernel. (None, None) for ``grouped`` kernels, r ≤ 1 (MHA) and MLA
    (one latent read by every head)."""
    mode = ex.rt.gqa_attention
    m = ex.model
    sizes = ex.rt.gqa_grouped_group_sizes
    if m.mla is not None or (mode == "grouped" and not sizes):
        return None, None
    r = ex.heads_per_device / ex.kv_heads_per_device
    if mode == "grouped":       # the per-query-head kernel where no grouped one exists for r
        fallback = (np.asarray(r) > 1.0) & ~np.isin(r, sizes)
        if not np.any(fallback):
            return None, None
        hbm, l2 = _per_query_head_bytes(ex, r, kv_read_tokens)
        return np.where(fallback, hbm, 0.0), np.where(fallback, l2, 0.0)
    if np.all(np.asarray(r) <= 1.0):      # (a sweep's stacked models share r <= 1 or r > 1)
        return None, None
    if mode == "per_query_head":
        return _per_query_head_bytes(ex, r, kv_read_tokens)
    k_bytes = np.asarray(kv_read_tokens, dtype=float) * ex.kv_bytes_per_token_layer
    h = l2_hit_fraction(ex, r * np.asarray(kv_read_tokens, dtype=float))
    return r * k_bytes + r * k_bytes * (1.0 - h), r * k_bytes * h


def _per_query_head_bytes(ex, r, kv_read_tokens):
    """(HBM, L2) bytes of r − 1 re-reads of K: (r − 1)·K·(1 − h), (r − 1)·K·h, h over K."""
    k_bytes = np.asarray(kv_read_tokens, dtype=float) * ex.kv_bytes_per_token_layer
    h = l2_hit_fraction(ex, kv_read_tokens)
    return (r - 1.0) * k_bytes * (1.0 - h), (r - 1.0) * k_bytes * h
