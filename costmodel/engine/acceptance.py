"""Expected tokens per verification step (τ, including the bonus token) for chains and batches.

* chain, i.i.d. acceptance α, γ drafts (Leviathan et al. 2023, Eq. 1):
      τ = Σ_{j=0..γ} α^j = (1 − α^(γ+1)) / (1 − α)
* lock-step batch of B sequences (the batch keeps the minimum accepted length):
      E[min over B] = Σ_{j=0..γ} P(all B accept j) = Σ_{j=0..γ} α^(j·B)
* chain with acceptance by position α_1..α_γ (α_k: token k accepted given tokens 1..k−1 were; EAGLE-3
  and MTP report them per position):
      τ = 1 + Σ_{k=1..γ} Π_{i≤k} α_i
  and a lock-step batch Σ_{j=0..γ} (Π_{i≤j} α_i)^B (the empty product is 1)
* α from a measured τ: the unique α in [0, 1] with chain τ(α, γ) = τ (bisection; τ is increasing in α).
"""

from __future__ import annotations

import numpy as np


def geometric_sum(r, n_terms):
    """Σ_{j=0..n−1} r^j for arrays (r = 1 gives n)."""
    r = np.asarray(r, dtype=float)
    n = np.asarray(n_terms, dtype=float)
    # 1 − r is 0 only at r = 1 exactly, where 1 − 1^n is 0 too (1^n = 1 for every n, inf and nan
    # included): 0/0 is "invalid", never "divide"
    with np.errstate(invalid="ignore"):
        s = (1.0 - r ** n) / (1.0 - r)
    # np.isclose(r, 1.0) (|r − 1| <= atol + rtol·|1|, rtol 1e-5, atol 1e-8; NaN and ±inf are not
    # close to 1) without its general-purpose broadcasting and infinity handling
    return np.where(np.abs(r - 1.0) <= 1e-08 + 1e-05 * 1.0, n, s)


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


def position_survival(alphas, gamma) -> np.ndarray:
    """P(the first j drafts all accepted) = Π_{i≤j} α_i for j = 0..γ (the first γ positions of
    ``alphas``), shape (γ + 1,) + the shape of ``gamma`` broadcast: positions beyond a row's γ are 0."""
    a = np.asarray(alphas, dtype=float)
    surv = np.concatenate([[1.0], np.cumprod(a)])
    g = np.asarray(gamma, dtype=float)
    j = np.arange(surv.size, dtype=float).reshape((-1,) + (1,) * g.ndim)
    return np.where(j <= g, surv.reshape((-1,) + (1,) * g.ndim), 0.0)


def chain_tokens_by_position(alphas, gamma) -> np.ndarray:
    """τ = 1 + Σ_{k=1..γ} Π_{i≤k} α_i (a chain whose acceptance varies with the position)."""
    return position_survival(alphas, gamma).sum(axis=0)


def lockstep_tokens_by_position(alphas, gamma, batch) -> np.ndarray:
    """Σ_{j=0..γ} (Π_{i≤j} α_i)^B: tokens per sequence per step of a lock-step batch."""
    s = position_survival(alphas, gamma)
    g, b = np.asarray(gamma, dtype=float), np.asarray(batch, dtype=float)
    s = s.reshape(s.shape[:1] + (1,) * max(b.ndim - g.ndim, 0) + g.shape)     # positions first, then γ, B
    return np.sum(s ** b, axis=0)
