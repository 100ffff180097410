"""Collectives and hand-offs between devices.

Ring all-reduce of S bytes over n devices (Patarasuk & Yuan 2009; NCCL's ring):
    t = 2·(n − 1)·latency + 2·(n − 1)/n · S / bandwidth
"""

from __future__ import annotations

import numpy as np

from .hardware import Link


def allreduce_time_s(message_bytes, n: int, link: Link, algorithm: str = "ring"):
    """Time of one all-reduce of ``message_bytes`` across ``n`` devices over ``link``.

    ring: 2(n−1)·α + 2(n−1)/n · S/β;  tree (double binary tree): 2·log2(n)·α + 2·S/β.
    """
    s = np.asarray(message_bytes, dtype=float)
    if n <= 1:
        return np.zeros_like(s)
    if algorithm == "tree":
        return 2.0 * np.log2(n) * link.latency_s + 2.0 * s / link.bandwidth_bytes_per_s
    return 2.0 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * s / link.bandwidth_bytes_per_s


def transfer_time_s(message_bytes, link: Link):
    """Point-to-point send: latency + S / bandwidth."""
    return link.latency_s + np.asarray(message_bytes, dtype=float) / link.bandwidth_bytes_per_s
