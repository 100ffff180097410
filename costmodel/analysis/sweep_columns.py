"""The sweep's output columns: grid-shaped arrays allocated on first write, filled block by block,
text kept as small-integer codes and returned as pandas categories. Used by
:mod:`costmodel.analysis.sweep`."""

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


#: the categorical dtypes made so far, by their categories (a pandas dtype is immutable: shared by the
#: frames of every sweep; building one costs ~30 µs, a sweep's frame has several text columns)
_TEXT_DTYPES: dict = {}


def text_dtype(texts):
    """The ``pandas.CategoricalDtype`` whose categories are ``texts`` (in that order), made once."""
    key = tuple(texts)
    hit = _TEXT_DTYPES.get(key)
    if hit is None:
        import pandas as pd

        if len(_TEXT_DTYPES) >= 1024:
            _TEXT_DTYPES.clear()
        hit = _TEXT_DTYPES[key] = pd.CategoricalDtype(pd.Index(list(key), dtype=object))
    return hit


class TextColumn:
    """A text column as grid-shaped integer codes into its distinct texts (-1: no text), turned into a
    ``pandas.Categorical`` for the frame (:meth:`categorical`). A chunk's text is a small-integer
    fill of its region instead of a reference per row, and the frame needs no pass over Python
    strings. A value that is neither text nor None is refused (:meth:`put` returns False): the
    caller keeps that column as objects (:meth:`objects`)."""

    def __init__(self, shape):
        self.codes = empty_aligned(shape, dtype=np.int8)
        self.codes.fill(-1)
        self.index: dict = {}             # text -> code, in first-written order

    @classmethod
    def of_codes(cls, codes: np.ndarray, texts: tuple) -> "TextColumn":
        """The column whose (int8) codes index ``texts`` (the bound names of ``CODE_KEYS``)."""
        col = cls.__new__(cls)
        col.codes, col.index = codes, {t: i for i, t in enumerate(texts)}
        return col

    def _code(self, v):
        if v is None:
            return -1
        c = self.index.get(v)
        if c is None:
            c = self.index[v] = len(self.index)
            if c > np.iinfo(self.codes.dtype).max:
                self.codes = self.codes.astype(np.int16 if c < 1 << 15 else np.int32)
        return c

    def put(self, where, value) -> bool:
        """Write ``value`` (a text, None, or an array of them broadcast to the region) at ``where``."""
        if isinstance(value, np.ndarray):
            flat = value.reshape(-1).tolist()
            if not all(v is None or isinstance(v, str) for v in flat):
                return False
            codes = [self._code(None if v is None else str(v)) for v in flat]
            self.codes[where] = np.asarray(codes, dtype=self.codes.dtype).reshape(value.shape)
            return True
        if not (value is None or isinstance(value, str)):
            return False
        self.codes[where] = self._code(None if value is None else str(value))
        return True

    def texts(self) -> list:
        return list(self.index)

    def objects(self) -> np.ndarray:
        """The column as an object array (None where there is no text)."""
        return np.asarray(self.texts() + [None], dtype=object)[self.codes]

    def categorical(self):
        """The column, flattened, as a ``pandas.Categorical`` whose categories are the texts it holds,
        sorted (what ``astype("category")`` gives); code -1 is a missing value."""
        import pandas as pd

        codes, texts = self.codes.reshape(-1), self.texts()
        held = [t for t, c in self.index.items() if (codes == c).any()] if len(texts) <= 32 else \
            [texts[c] for c in np.unique(codes) if c >= 0]
        order = sorted(held)
        new = {self.index[t]: i for i, t in enumerate(order)}        # code -> its category's place
        if any(c != i for c, i in new.items()):
            if len(new) == 1:             # one text held: 0 where it is, -1 elsewhere (two cheap passes)
                codes = np.subtract(np.equal(codes, next(iter(new))).view(np.int8), np.int8(1))
            else:
                lookup = np.full(len(texts) + 1, -1, dtype=codes.dtype)      # [-1] (no text) -> -1
                for c, i in new.items():
                    lookup[c] = i
                codes = lookup[codes]
        return pd.Categorical.from_codes(codes, dtype=text_dtype(order))


#: float columns smaller than this come from slabs of SLAB_COLUMNS columns (Columns._float_column)
SLAB_BELOW_BYTES = 4 << 20
SLAB_COLUMNS = 48


class Columns:
    """Grid-shaped output columns, allocated on first write (NaN / no text where a block has no
    value). Text is a :class:`TextColumn`; ``CODE_KEYS`` are kept as int8 codes until :meth:`finish`
    makes each one (its codes index the bound names)."""

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
        if type(a) is np.ndarray and type(value) is np.ndarray and value.dtype == a.dtype == np.float64:
            a[where] = value              # a float column written again (the common case)
            self.written[key] += rows
            if self.multi:
                self.wheres[key].append(where)
            return
        if key in CODE_KEYS:
            self._put_code(key, where, rows, value)
            return
        kind = value_kind(value)
        if type(a) is TextColumn:
            if kind == "o" and a.put(where, value):
                self._wrote(key, where, rows)
                return
            a = self.cols[key] = a.objects()          # numbers or other objects: an object column
        if a is None and kind == "o":
            a = TextColumn(self.shape)
            self.cols[key], self.wheres[key], self.written[key] = a, [], 0
            if a.put(where, value):
                self._wrote(key, where, rows)
                return
            a = self.cols[key] = a.objects()
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
        self._wrote(key, where, rows)

    def _wrote(self, key, where, rows) -> None:
        self.written[key] += rows
        if self.multi:
            self.wheres[key].append(where)

    def adopt(self, got: dict) -> None:
        """Columns evaluated elsewhere (forked processes, ``fast.sweep_fork``), every row written:
        numeric arrays, int8 bound codes (CODE_KEYS) and constant text (a str, every row's)."""
        for key, v in got.items():
            if isinstance(v, str):
                text, v = v, TextColumn(self.shape)
                v.codes.fill(v._code(text))
            elif key in CODE_KEYS:
                self.coded.add(key)
            self.cols[key], self.wheres[key], self.written[key] = v, [], self.n

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
            if type(a) is TextColumn:           # no text: code -1
                if rows is not None and a.codes.flags.c_contiguous:
                    a.codes.reshape(-1)[rows] = -1
                else:
                    np.putmask(a.codes, mask, -1)
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
        """The columns as returned: bound codes as text columns, bool and int columns that some rows
        lack widened; with ``mask`` (invalid rows) those rows blanked (:meth:`blank`; a bound code
        there is set to -1 first: a missing text)."""
        rows = None
        if mask is not None and self.multi:
            # several blocks: a row no block wrote is blank already (NaN, None, text or bound code -1)
            rows = np.flatnonzero(mask & self.rows_written) if self.rows_written is not None else \
                np.zeros(0, dtype=np.intp)
        for key, a in list(self.cols.items()):
            if key in self.coded:
                if rows is not None and a.flags.c_contiguous:
                    a.reshape(-1)[rows] = -1
                elif mask is not None:
                    np.putmask(a, mask, np.int8(-1))
                self.cols[key] = TextColumn.of_codes(a, BOUNDS)
                continue
            if type(a) is TextColumn:
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


def axis_column(vals: np.ndarray, k: int, shape):
    """The frame column of axis k (values ``vals``) over a grid of ``shape``, in row order: a text
    axis a ``pandas.Categorical`` (categories its values, sorted, as :class:`TextColumn` gives
    them), any other a flat array."""
    s = [1] * len(shape)
    s[k] = len(vals)
    texts = vals.tolist()
    if vals.dtype == object and texts and all(isinstance(v, str) for v in texts):
        import pandas as pd

        order = sorted(set(texts))        # every value of an axis is in the grid: each a category
        place = {t: i for i, t in enumerate(order)}
        codes = empty_aligned(shape, dtype=np.int8 if len(order) < 128 else np.int32)
        codes[...] = np.asarray([place[t] for t in texts], dtype=codes.dtype).reshape(s)
        return pd.Categorical.from_codes(codes.reshape(-1), dtype=text_dtype(order))
    return contiguous(np.broadcast_to(vals.reshape(s), shape)).reshape(-1)


def text_categories(series):
    """A frame's object column as the in-process sweep returns it (a chunked engine's rows, gathered):
    a Categorical with :class:`TextColumn`'s categories (the texts held, sorted) when it holds only
    text and missing values; else as it is."""
    import pandas as pd

    seen = pd.unique(series.to_numpy())
    if not all(v is None or isinstance(v, str) or (isinstance(v, float) and v != v) for v in seen):
        return series
    return series.astype(text_dtype(sorted(v for v in seen if isinstance(v, str))))


def frame_column(a):
    """A grid-shaped output column as a frame column: a :class:`TextColumn` as its Categorical, an
    array flattened."""
    return a.categorical() if type(a) is TextColumn else a.reshape(-1)


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
