"""Memory footprint on the most loaded device, and whether it fits.

    peak = weights/(tp·pp) + KV tokens stored · KV bytes per token per device
           + transient activations (largest pass) + unfused attention scores + runtime overhead

KV bytes per token per device = 2 · layers/pp · ceil(kv_heads/tp) · head_dim · bytes.
Activations of a pass of T tokens: T·(2·d + (q + 2·kv)/tp + q/tp + 3·d_ff/tp)·act_bytes plus fp32
logits for the tokens that need them (MoE: 3·k·d_ff for the k experts a token runs); unfused attention keeps one layer's fp32 score matrix.
"""

from __future__ import annotations

import numpy as np

from costmodel.engine.ops import Exec


def activation_bytes(ex: Exec, tokens, lm_tokens) -> np.ndarray:
    m, tp = ex.model, ex.tp
    t = np.asarray(tokens, dtype=float)
    # MoE: each token runs its experts_per_token experts, each holding its own gate/up/activation
    per_token = (2 * m.d_model + (m.q_dim + 2 * m.kv_dim) / tp + m.q_dim / tp
                 + 3 * m.experts_per_token * m.d_ff / tp)
    return t * (per_token * ex.act_bytes) + np.asarray(lm_tokens, dtype=float) * (m.vocab_size / tp * 4.0)


def score_bytes(ex: Exec, pairs) -> np.ndarray:
    """One layer's materialised fp32 attention scores (0 with a fused kernel)."""
    if ex.rt.fused_attention:
        return np.float64(0.0)
    return 4.0 * ex.heads_per_device * np.asarray(pairs, dtype=float)

