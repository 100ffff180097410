"""Expected tokens per verification step (τ, including the bonus token) for chains and batches.

* chain, i.i.d. acceptance α, γ drafts (Leviathan et al. 2023, Eq. 1):
      τ = Σ_{j=0..γ} α^j = (1 − α^(γ+1)) / (1 − α)
* lock-step batch of B sequences (the batch keeps the minimum accepted length):
      E[min over B] = Σ_{j=0..γ} P(all B accept j) = Σ_{j=0..γ} α^(j·B)
* α from a measured τ: the unique α in [0, 1] with chain τ(α, γ) = τ (bisection; τ is increasing in α).
"""

from __future__ import annotations

import numpy as np


def geometric_sum(r, n_terms):
    """Σ_{j=0..n−1} r^j for arrays (r = 1 gives n)."""
    r = np.asarray(r, dtype=float)
    n = np.asarray(n_terms, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (1.0 - r ** n) / (1.0 - r)
    return np.where(np.isclose(r, 1.0), n, s)


def chain_tokens_per_step(alpha, gamma):
    """Leviathan: (1 − α^(γ+1)) / (1 − α)."""
    return geometric_sum(alpha, np.asarray(gamma, dtype=float) + 1.0)


def lockstep_tokens_per_step(alpha, gamma, batch):
    """Σ_{j=0..γ} α^(j·B): tokens per sequence per step when the batch advances by its minimum."""
    r = np.asarray(alpha, dtype=float) ** np.asarray(batch, dtype=float)
    return geometric_sum(r, np.asarray(gamma, dtype=float) + 1.0)


def alpha_from_tau(tau, gamma, iterations: int = 64):
    """Invert the chain formula: α with (1 − α^(γ+1))/(1 − α) = τ, for 1 ≤ τ ≤ γ+1."""
    tau = np.asarray(tau, dtype=float)
    lo = np.zeros(np.broadcast(tau, np.asarray(gamma)).shape)
    hi = np.ones_like(lo)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = chain_tokens_per_step(mid, gamma) > tau
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return 0.5 * (lo + hi)


def default_rank_acceptance(alpha: float, k: int = 8) -> tuple:
    """Rank model used when only α is known: p_i = α·(1 − α)^(i−1), i = 1..k.

    The top-ranked child is accepted with probability α; each lower-ranked child gets α of what
    the higher ranks left (independent draws). Σ p_i = 1 − (1 − α)^k ≤ 1, and a width-1 tree
    reduces exactly to Leviathan's chain.
    """
    return tuple(float(alpha * (1.0 - alpha) ** (i - 1)) for i in range(1, k + 1))
