"""γ schedules: the number of draft tokens by the number of sequences running together.

vLLM (``speculative_disable_by_batch_size``) and TensorRT-LLM ship speculation that shortens or
switches off as the batch grows. A schedule is written ``1-64:3,65-128:1,129-:0``: ranges of running
sequences, ascending from 1 without gaps, each with its γ (0 = plain autoregressive decoding); the
last range may be open (``129-``), and a closed last range is extended with its own γ.

The record field ``gamma_schedule`` holds the canonical text (:func:`canonical`); the engine and the
serving simulator read the ranges with :func:`ranges` and look γ up with :func:`gamma_for` (one
batch size) or :func:`gammas_for` (arrays).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from costmodel.errors import InputError

#: the largest γ a schedule may name (as the ``gamma`` field)
MAX_GAMMA = 64
ALLOWED = f"LO-HI:GAMMA ranges from 1 upwards without gaps, the last may be open (129-:0), γ in 0..{MAX_GAMMA}"


def parse_gamma_schedule(text, source: str = "record", field: str = "gamma_schedule") -> tuple:
    """``1-64:3,65-128:1,129-:0`` -> ((1, 64, 3), (65, 128, 1), (129, inf, 0)); InputError naming
    ``field`` otherwise. A tuple of (lo, hi, γ) triples is returned as it is."""
    if isinstance(text, (tuple, list)) and text and all(isinstance(t, tuple) for t in text):
        return tuple(text)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"must be text, got {text!r}", source=source, field=field, allowed=ALLOWED)
    out, expect = [], 1
    for part in text.replace(" ", "").split(","):
        try:
            rng, g = part.split(":")
            lo, hi = rng.split("-")
            lo, g = int(lo), int(g)
            hi = math.inf if hi == "" else int(hi)
        except ValueError:
            raise InputError(f"bad range {part!r}", source=source, field=field, allowed=ALLOWED) from None
        if lo != expect or hi < lo or g < 0 or g > MAX_GAMMA:
            raise InputError(f"range {part!r} does not continue from {expect} (or γ outside 0..{MAX_GAMMA})",
                             source=source, field=field, allowed=ALLOWED)
        out.append((lo, hi, g))
        expect = hi + 1
        if math.isinf(hi):
            break
    if not math.isinf(out[-1][1]):
        out.append((expect, math.inf, out[-1][2]))
    return tuple(out)


def canonical(text, source: str = "record") -> str:
    """The schedule as the record keeps it: ``LO-HI:G`` ranges, the last one open."""
    return ",".join(f"{lo}-{'' if math.isinf(hi) else hi}:{g}" for lo, hi, g in parse_gamma_schedule(text, source))


@functools.lru_cache(maxsize=256)
def ranges(text: str) -> tuple:
    """The (lo, hi, γ) ranges of a canonical schedule (cached)."""
    return parse_gamma_schedule(text)


def gamma_for(schedule, n_running: int) -> int:
    """γ for ``n_running`` sequences (``schedule``: ranges or text)."""
    sched = ranges(schedule) if isinstance(schedule, str) else schedule
    for lo, hi, g in sched:
        if lo <= n_running <= hi:
            return g
    return sched[-1][2]


def gammas_for(schedule, n_running) -> np.ndarray:
    """γ for each element of ``n_running`` (an array of batch sizes; below 1 reads as 1)."""
    sched = ranges(schedule) if isinstance(schedule, str) else schedule
    highs = np.asarray([hi for _, hi, _ in sched], dtype=float)
    gs = np.asarray([g for _, _, g in sched], dtype=float)
    i = np.searchsorted(highs, np.maximum(np.asarray(n_running, dtype=float), 1.0), side="left")
    return gs[np.minimum(i, len(gs) - 1)]


def max_gamma(schedule) -> int:
    """The largest γ the schedule uses."""
    sched = ranges(schedule) if isinstance(schedule, str) else schedule
    return max(g for _, _, g in sched)
