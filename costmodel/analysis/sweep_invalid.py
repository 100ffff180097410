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
    first reason given for a row is kept. The boolean grid of marked rows is kept alongside (a
    region with no marked row is written at once, and :attr:`mask` is that grid, not a comparison
    of every reason with None)."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.reasons = None
        self._marked = None               # rows given a reason so far (allocated with the reasons)

    def mark(self, where, reason: str, mask=None) -> None:
        if self.reasons is None:
            self.reasons = np.full(self.shape, None, dtype=object)
            self._marked = np.zeros(self.shape, dtype=bool)
        marked = self._marked[where]
        if np.ndim(marked) == 0:
            if not marked:
                self.reasons[where] = reason
                self._marked[where] = True
            return
        if mask is None and not marked.any():     # nothing marked there yet: every row takes the reason
            self.reasons[where] = reason
            self._marked[where] = True
            return
        free = ~marked
        if mask is not None:
            free &= np.broadcast_to(mask, marked.shape)
        region = self.reasons[where]
        region[free] = reason
        if region.base is not self.reasons:     # a copy (a list of indices), not a view: written back
            self.reasons[where] = region
        self._marked[where] = marked | free

    def mark_regions(self, regions) -> None:
        """:meth:`mark` of each (where, reason) of ``regions``, which do not overlap one another (a sweep's
        refused groups): at once when every ``where`` fixes the same axes by integer index and takes
        the others whole (``slice(None)``) and none of their rows is marked yet; one by one otherwise."""
        regions = list(regions)
        if not regions:
            return
        whole = slice(None)
        fixed = [k for k, w in enumerate(regions[0][0]) if not isinstance(w, slice)]
        simple = all(len(w) == len(self.shape) and all(
            (k in fixed) == (not isinstance(x, slice)) and (isinstance(x, slice) and x == whole or
                                                            isinstance(x, (int, np.integer)) and 0 <= x < self.shape[k])
            for k, x in enumerate(w)) for w, _r in regions)
        if self.reasons is None:
            self.reasons = np.full(self.shape, None, dtype=object)
            self._marked = np.zeros(self.shape, dtype=bool)
        if simple:
            strides = np.cumprod((self.shape + (1,))[:0:-1])[::-1]          # elements per step of each axis
            base = np.asarray([[w[k] for k in fixed] for w, _r in regions], dtype=np.int64) @ strides[fixed] \
                if fixed else np.zeros(len(regions), dtype=np.int64)
            offsets = np.zeros(1, dtype=np.int64)
            for k in range(len(self.shape)):
                if k not in fixed:
                    offsets = (offsets[:, None] + np.arange(self.shape[k]) * strides[k]).ravel()
            flat = base[:, None] + offsets[None, :]
            marked = self._marked.reshape(-1)
            if not marked[flat].any():
                reasons = np.empty(len(regions), dtype=object)
                reasons[:] = [r for _w, r in regions]
                self.reasons.reshape(-1)[flat] = reasons[:, None]
                marked[flat] = True
                return
        for where, reason in regions:
            self.mark(where, reason)

    @property
    def mask(self):
        """Boolean grid of invalid rows, or None when there are none (the caller must not write it)."""
        return self._marked

    def count(self) -> int:
        m = self.mask
        return 0 if m is None else int(m.sum())
