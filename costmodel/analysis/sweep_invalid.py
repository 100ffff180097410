"""Invalid rows of a sweep: ``on_invalid="error" | "mark" | "drop"``.

A grid may hold combinations that ``evaluate()`` refuses: a group whose record does not parse or
whose model and devices do not go together (8 devices for a model with 12 attention heads), or
rows whose numeric values contradict each other (``shared_prefix_len > prompt_len``, τ outside
[1, γ + 1], α and τ disagreeing). ``error`` (the default) refuses the whole grid with the first
such row's message; ``mark`` evaluates the rest and gives every output of an invalid row NaN (text
columns None) and its reason in the column ``invalid_reason`` (None on valid rows); ``drop``
leaves invalid rows out.
"""

from __future__ import annotations

import numpy as np

from costmodel.errors import InputError

ON_INVALID = ("error", "mark", "drop")
REASON_COLUMN = "invalid_reason"


def check_on_invalid(value) -> str:
    if value not in ON_INVALID:
        raise InputError(f"unknown on_invalid {value!r}", source="sweep", field="on_invalid",
                         allowed=", ".join(ON_INVALID))
    return value


class InvalidRows:
    """Grid-shaped reasons (None = valid), allocated when the first invalid row is marked; the
    first reason given for a row is kept."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.reasons = None
        self._mask = None                 # the mask of the reasons as they stand (None: not computed)

    def mark(self, where, reason: str, mask=None) -> None:
        if self.reasons is None:
            self.reasons = np.full(self.shape, None, dtype=object)
        self._mask = None
        region = self.reasons[where]
        if np.ndim(region) == 0:
            if region is None:
                self.reasons[where] = reason
            return
        free = np.equal(region, None)
        if mask is not None:
            free &= np.broadcast_to(mask, region.shape)
        region[free] = reason
        if region.base is not self.reasons:     # a copy (a list of indices), not a view: written back
            self.reasons[where] = region

    @property
    def mask(self):
        """Boolean grid of invalid rows, or None when there are none (computed once per marking)."""
        if self.reasons is None:
            return None
        if self._mask is None:
            self._mask = np.not_equal(self.reasons, None)
        return self._mask

    def count(self) -> int:
        m = self.mask
        return 0 if m is None else int(m.sum())
