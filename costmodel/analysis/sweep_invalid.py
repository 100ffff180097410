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

    def mark_indexed(self, names, groups) -> None:
        """:meth:`mark` of each (index, reason) of ``groups``, which do not overlap one another (a
        sweep's refused groups): ``index`` maps some of the axes ``names`` to a value index, the other
        axes are taken whole. At once when every index fixes the same axes and none of their rows is
        marked yet; one by one otherwise."""
        groups = list(groups)
        if not groups:
            return
        if self.reasons is None:
            self.reasons = np.full(self.shape, None, dtype=object)
            self._marked = np.zeros(self.shape, dtype=bool)
        keys = groups[0][0].keys()
        fixed = [k for k, n in enumerate(names) if n in keys]
        if len(fixed) == len(keys) and all(index.keys() == keys for index, _r in groups):
            ints = np.asarray([[index[names[k]] for k in fixed] for index, _r in groups])
            if ints.dtype.kind in "iu" and (ints >= 0).all() and (ints < np.asarray(self.shape)[fixed]).all():
                strides = np.cumprod((self.shape + (1,))[:0:-1])[::-1]      # elements per step of each axis
                offsets = np.zeros(1, dtype=np.int64)
                for k in range(len(self.shape)):
                    if k not in fixed:
                        offsets = (offsets[:, None] + np.arange(self.shape[k]) * strides[k]).ravel()
                flat = (ints.astype(np.int64) @ strides[fixed])[:, None] + offsets[None, :]
                marked = self._marked.reshape(-1)
                if not marked[flat].any():
                    reasons = np.empty(len(groups), dtype=object)
                    reasons[:] = [r for _i, r in groups]
                    self.reasons.reshape(-1)[flat] = reasons[:, None]
                    marked[flat] = True
                    return
        whole = slice(None)
        for index, reason in groups:
            self.mark(tuple(index.get(n, whole) for n in names), reason)

    @property
    def mask(self):
        """Boolean grid of invalid rows, or None when there are none (the caller must not write it)."""
        return self._marked

    def count(self) -> int:
        m = self.mask
        return 0 if m is None else int(m.sum())
