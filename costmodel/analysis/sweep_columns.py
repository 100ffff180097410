"""The sweep's output columns: grid-shaped arrays allocated on first write, filled block by block,
bound codes turned into text once per column. Used by :mod:`costmodel.analysis.sweep`."""

from __future__ import annotations

import math

import numpy as np

from costmodel.engine.roofline import BOUNDS
from costmodel.inputs.fields import BY_NAME
from costmodel.fast.arrays import empty_aligned

# ----------------------------------------------------------------------------------------- columns

def value_kind(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "b"
    if isinstance(v, (int, np.integer)):
        return "i"
    if isinstance(v, (float, np.floating)):
        return "f"
    if isinstance(v, np.ndarray):
        return array_kind(v)
    return "o"


def array_kind(a) -> str:
    return {"b": "b", "i": "i", "u": "i", "f": "f"}.get(a.dtype.kind, "o")


#: text columns that chunks deliver as int8 indices into roofline.BOUNDS (evaluate_arrays(bound_codes=True))
CODE_KEYS = ("bound", "prefill_bound")
#: the text of each code; -1 (a row no block wrote) reads as None
CODE_TEXT = np.asarray(BOUNDS + (None,), dtype=object)


#: float columns smaller than this come from slabs of SLAB_COLUMNS columns (Columns._float_column)
SLAB_BELOW_BYTES = 4 << 20
SLAB_COLUMNS = 48


class Columns:
    """Grid-shaped output columns, allocated on first write (NaN / None where a block has no value).
    ``CODE_KEYS`` are kept as int8 codes until :meth:`finish` turns each into text in one pass."""

    def __init__(self, shape, multi: bool):
        self.shape = tuple(shape)
        self.n = int(np.prod(self.shape, dtype=np.int64))
        self.multi = multi
        self.cols: dict = {}
        self.wheres: dict = {}
        self.written: dict = {}
        self.coded: set = set()
        self._slab: list = []
        self.rows_written = None          # multi: the rows some block wrote (:meth:`wrote`)

    def _float_column(self) -> np.ndarray:
        """A new float column. Below ``SLAB_BELOW_BYTES`` a column is the next row of a slab of
        ``SLAB_COLUMNS`` columns, one allocation that numpy backs with huge pages (it is over 4 MiB)
        and that empty_aligned aligns: a 51,840-row column of its own would take ~100 page faults
        on first write (40 columns: ~6 ms), a slab one per 2 MiB. Rows never written are never
        touched (address space only)."""
        if self.n * 8 >= SLAB_BELOW_BYTES:
            return empty_aligned(self.shape)
        if not self._slab:
            self._slab = list(empty_aligned((SLAB_COLUMNS,) + self.shape))
        return self._slab.pop()

    def put(self, key, where, rows, value):
        a = self.cols.get(key)
        if a is not None and type(value) is np.ndarray and value.dtype == a.dtype == np.float64:
            a[where] = value              # a float column written again (the common case)
            self.written[key] += rows
            if self.multi:
                self.wheres[key].append(where)
            return
        if key in CODE_KEYS:
            self._put_code(key, where, rows, value)
            return
        kind = value_kind(value)
        if a is None:
            if kind == "f":
                a = self._float_column()
                if self.multi:
                    a.fill(np.nan)
            elif kind in "bi":
                a = empty_aligned(self.shape, dtype=bool if kind == "b" else np.int64)
                a.fill(0)
            else:
                a = np.empty(self.shape, dtype=object)      # None-filled
            self.cols[key], self.wheres[key], self.written[key] = a, [], 0
        else:
            have = array_kind(a)
            if have != kind and not (have == "f" and kind in "bi") and have != "o":
                a = self._widen(key, kind)
        a[where] = value
        self.written[key] += rows
        if self.multi:
            self.wheres[key].append(where)

    def wrote(self, where) -> None:
        """A block wrote its outputs at ``where`` (kept with several blocks: the rows a blank must
        reach; every other row holds NaN / None / -1 from the start)."""
        if self.multi:
            if self.rows_written is None:
                self.rows_written = np.zeros(self.shape, dtype=bool)
            self.rows_written[where] = True

    def _put_code(self, key, where, rows, value):
        a = self.cols.get(key)
        if a is None:
            a = empty_aligned(self.shape, dtype=np.int8)
            if self.multi:
                a.fill(-1)
            self.cols[key], self.wheres[key], self.written[key] = a, [], 0
            self.coded.add(key)
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            a[where] = value
        elif isinstance(value, np.ndarray):          # text from a row-by-row block
            a[where] = np.asarray([BOUNDS.index(v) for v in value.reshape(-1)], dtype=np.int8).reshape(value.shape)
        else:
            a[where] = BOUNDS.index(value)
        self.written[key] += rows

    def _widen(self, key, kind):
        a, have = self.cols[key], array_kind(self.cols[key])
        if have == "i" and kind == "f":
            new = a.astype(float)
        else:
            new = a.astype(object)
        self._fill_missing(key, new)
        self.cols[key] = new
        return new

    def _fill_missing(self, key, a):
        if self.written[key] >= self.n or array_kind(a) in "bi":
            return
        mask = np.zeros(self.shape, dtype=bool)
        for w in self.wheres[key]:
            mask[w] = True
        a[~mask] = np.nan if array_kind(a) == "f" else None

    def blank(self, mask, skip=(), rows=None) -> None:
        """Rows where ``mask`` holds have no outputs: NaN (bool and int columns become object and
        float), None in text columns (``skip``: keys left as they are). ``rows``: the flat indices
        of the rows to write (those of ``mask`` that hold anything else), instead of ``mask``."""
        for key, a in list(self.cols.items()):
            if key in skip:
                continue
            kind = array_kind(a)
            if kind in "bi":
                a = a.astype(float) if kind == "i" else a.astype(object)
            blank = np.nan if array_kind(a) == "f" else None
            if rows is not None and a.flags.c_contiguous:
                a.reshape(-1)[rows] = blank
            elif blank is None:
                a[mask] = None
            else:
                np.putmask(a, mask, np.nan)         # one pass, no index array built
            self.cols[key] = a

    def finish(self, mask=None):
        """The columns as returned: bound codes turned into text, bool and int columns that some rows
        lack widened; with ``mask`` (invalid rows) those rows blanked (:meth:`blank`; a bound code
        there is set to -1 first, read as None, instead of writing None into the text)."""
        rows = None
        if mask is not None and self.multi:
            # several blocks: a row no block wrote is blank already (NaN, None, code -1)
            rows = np.flatnonzero(mask & self.rows_written) if self.rows_written is not None else \
                np.zeros(0, dtype=np.intp)
        for key, a in list(self.cols.items()):
            if key in self.coded:
                if rows is not None and a.flags.c_contiguous:
                    a.reshape(-1)[rows] = -1
                elif mask is not None:
                    np.putmask(a, mask, np.int8(-1))
                self.cols[key] = CODE_TEXT[a]
                continue
            if self.written[key] < self.n and array_kind(a) in "bi":
                new = a.astype(float) if array_kind(a) == "i" else a.astype(object)
                self._fill_missing(key, new)
                self.cols[key] = new
        if mask is not None:
            self.blank(mask, skip=self.coded, rows=rows)


# ----------------------------------------------------------------------------------------- axes

def axis_array(a) -> np.ndarray:
    """An axis's column values (its parsed values; a refused value as given, NaN when not a number)."""
    vals = a.values
    if a.numeric and a.refused:          # a refused value shows as given (NaN when not a number)
        vals = list(vals)
        for i in a.refused:
            raw = a.raw[i]
            vals[i] = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else _number_or_nan(raw)
        ints = BY_NAME[a.name].kind == "int" and all(isinstance(v, int) for v in vals)
        return np.asarray(vals, dtype=np.int64 if ints else float)
    if a.numeric:
        return np.asarray(vals, dtype=np.int64 if BY_NAME[a.name].kind == "int" else float)
    if all(isinstance(v, bool) for v in vals):
        return np.asarray(vals, dtype=bool)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return np.asarray(vals, dtype=np.int64)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return np.asarray(vals, dtype=float)
    out = np.empty(len(vals), dtype=object)
    out[:] = vals
    return out


def _number_or_nan(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def contiguous(a: np.ndarray) -> np.ndarray:
    """np.ascontiguousarray(a), a large copy on huge pages (fast.arrays.empty_aligned)."""
    if a.flags.c_contiguous or a.dtype.hasobject:
        return np.ascontiguousarray(a)
    out = empty_aligned(a.shape, a.dtype)
    np.copyto(out, a)
    return out
