"""sweep(base_record, **axes) -> pandas.DataFrame: the Cartesian grid of the axes, vectorised.

    >>> import costmodel
    >>> df = costmodel.sweep({"model": "llama-2-7b", "hardware": "a100-80gb", "prompt_len": 512},
    ...                      batch_size=[1, 8, 64], hardware=["a100-80gb", "h100-sxm"])
    >>> len(df)
    6

Rows are the Cartesian product of the axes in the order given (the last axis varies fastest,
like ``itertools.product``); each row equals ``evaluate(base_record | that row's axis values)``.
Columns: the axes (their parsed values), then every key ``evaluate()`` returns (DESIGN §4 outputs
and the breakdowns). Where an output key has an axis's name (``shared_prefix_len``, ``tree_nodes``,
``tree_depth``), the column holds the axis value; ``evaluate()`` would report the resolved one.

How it is evaluated (DESIGN §6: no Python loop per row):

* The grid is grouped by the axes that fix the model, hardware, runtime, strategy, dtypes, devices,
  tree shape, … (everything but :data:`costmodel.engine.evaluate.NUMERIC_AXES`). Each group is one call of
  :func:`costmodel.engine.evaluate.evaluate_arrays` with the numeric axes as numpy arrays shaped to
  broadcast against each other (batch (n, 1) × prompt (1, m)), so work that depends on one axis
  only is done once per value of that axis. Groups are cut into chunks of ``chunk_rows`` rows
  (32768 by default: arrays that stay in the CPU cache) along their first numeric axis; the
  per-operator breakdown (``Cost.ops``) is not built. With ``workers`` > 1 a one-group grid is
  evaluated on forked processes that write into shared output columns (:mod:`costmodel.fast.sweep_fork`:
  threads do not help, the Python between numpy calls holds the GIL); on platforms without
  ``fork``, in a process with other threads running, or for several groups, on threads.
* For token trees the acceptance figures pick the tree's shape, so ``acceptance_rate`` and
  ``mean_accepted_tokens`` are looped over there; ``tree_shape=optimal_for_hardware`` searches a
  tree per configuration and is evaluated row by row.
* Validation: each group's record goes through :func:`costmodel.inputs.record.parse_record` (a real
  row of the grid: the group's values and the first value of every numeric axis); each distinct
  numeric axis value is converted once with the limits of ``record.py``; the checks that tie
  numeric fields together (``shared_prefix_len <= prompt_len``, 1 <= τ <= γ+1, α and τ agreeing)
  run vectorised over the grid, and the first offending row is re-parsed so that the message is
  exactly ``parse_record``'s, naming the axis.

``engine="dask"`` cuts the grid into chunks of about ``chunk_rows`` rows and evaluates them on a
``dask.distributed`` cluster (a ``LocalCluster`` by default, or the scheduler address / Client
given as ``scheduler``); with ``output`` the workers write partitioned Parquet
(``part.00000.parquet``, …) so results larger than memory never pass through one process. See
``docs/sweep.md``.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field

import numpy as np

from costmodel.analysis.sweep_invalid import REASON_COLUMN, InvalidRows, check_on_invalid
from costmodel.fast.sweep_fork import can_fork, evaluate_forked
from costmodel.errors import InputError
from costmodel.engine.evaluate import NUMERIC_AXES, evaluate, evaluate_arrays
from costmodel.engine.roofline import BOUNDS, operator_rows
from costmodel.inputs.record import FIELD_NAMES, INT_FIELDS, Record, _as_float, _as_int, _empty, parse_record

__all__ = ["sweep", "parse_axis", "grid_size", "DEFAULT_CHUNK_ROWS"]

#: rows per evaluate_arrays call in process: 32768-element arrays (256 KiB) stay in cache, which
#: makes each array operation 2-3x faster than on million-element arrays
CHUNK_ROWS = 1 << 15
#: rows per Dask task (each task evaluates its rows in CHUNK_ROWS pieces): 2**20 rows of ~45
#: columns is ~0.4 GB of results per task
DEFAULT_CHUNK_ROWS = 1 << 20
LIST_FIELDS = ("rank_acceptance", "tree_parents")
ENGINES = ("numpy", "dask")
#: fields whose value is read from the record (not the arrays) by a strategy: looped per value there
_TREE_LOOP = ("acceptance_rate", "mean_accepted_tokens")
_SOURCE = "sweep"


# ----------------------------------------------------------------------------------------- axes

def parse_axis(name: str, spec) -> list:
    """Values of one axis. Python: a list/tuple/range/array (or one scalar). Text (command line):
    ``V1,V2,...``; ``START:STOP[:STEP]`` (STOP included); ``START:STOP:*F`` (geometric, ×F);
    list-valued fields (``rank_acceptance``, ``tree_parents``) separate alternatives with ``|``."""
    if name not in FIELD_NAMES:
        from costmodel.errors import suggest
        raise InputError(f"unknown field{suggest(name, FIELD_NAMES)}", source=_SOURCE, field=name,
                         allowed=", ".join(FIELD_NAMES))
    if isinstance(spec, str):
        return _parse_axis_text(name, spec)
    if isinstance(spec, (range, np.ndarray)):
        return list(np.asarray(spec).tolist()) if isinstance(spec, np.ndarray) else list(spec)
    if isinstance(spec, (list, tuple)):
        if name in LIST_FIELDS and spec and not any(isinstance(v, (list, tuple, str)) for v in spec):
            return [tuple(spec)]          # one list value, not several alternatives
        return list(spec)
    return [spec]


def _parse_axis_text(name: str, text: str) -> list:
    s = text.strip()
    if name in LIST_FIELDS:
        return [p.strip() for p in s.split("|")]
    if "," in s:
        return [p.strip() for p in s.split(",")]
    if s.count(":") in (1, 2):
        parts = s.split(":")
        try:
            start, stop = float(parts[0]), float(parts[1])
        except ValueError:
            return [s]
        step_txt = parts[2].strip() if len(parts) == 3 else "1"
        geometric = step_txt.startswith(("*", "x"))
        try:
            step = float(step_txt[1:] if geometric else step_txt)
        except ValueError:
            raise InputError(f"bad range step {step_txt!r}", source=_SOURCE, field=name,
                             allowed="START:STOP, START:STOP:STEP or START:STOP:*FACTOR (STOP included)") from None
        if geometric:
            if step <= 1 or start <= 0:
                raise InputError(f"bad geometric range {s!r}", source=_SOURCE, field=name,
                                 allowed="START > 0 and FACTOR > 1, e.g. 1:1024:*2")
            n = int(math.floor(math.log(stop / start) / math.log(step) + 1e-9)) + 1 if stop >= start else 0
            vals = [start * step ** i for i in range(max(n, 0))]
        else:
            if step <= 0:
                raise InputError(f"range step must be > 0, got {step_txt!r}", source=_SOURCE, field=name)
            n = int(math.floor((stop - start) / step + 1e-9)) + 1 if stop >= start else 0
            vals = [start + step * i for i in range(max(n, 0))]
        if not vals:
            raise InputError(f"empty range {s!r}", source=_SOURCE, field=name, allowed="START <= STOP")
        return [_tidy(v) for v in vals]
    return [s]


def _tidy(v: float):
    """0.1·3 → 0.3 (12 significant digits); integral values as int."""
    v = float(f"{v:.12g}")
    return int(v) if v == int(v) and abs(v) < 2 ** 53 else v


def grid_size(**axes) -> int:
    """Number of rows of the grid of ``axes`` (values as for :func:`sweep`)."""
    return int(np.prod([len(parse_axis(k, v)) for k, v in axes.items()], dtype=np.int64))


# ----------------------------------------------------------------------------------------- plan

@dataclass
class _Axis:
    name: str
    raw: list                      # values as given
    numeric: bool                  # vectorised (a NUMERIC_AXES field with only numeric values)
    values: list = field(default_factory=list)    # parsed values (numeric) / canonical (filled later)
    refused: dict = field(default_factory=dict)   # value index -> why (on_invalid != "error")


@dataclass
class _Block:
    """One evaluate_arrays call site: the record and the grid positions it covers."""

    rec: Record | None
    index: dict                    # axis name -> fixed value index (group and loop axes)
    vec: list                      # names of the vectorised axes (in grid order)
    rowwise: bool = False
    label: str = ""
    invalid: str | None = None     # why every row of the block is invalid (on_invalid != "error")


def _plan_axes(base: dict, axes: dict, strict: bool = True) -> list[_Axis]:
    """The axes with their values parsed; a numeric value out of its field's range raises, or with
    ``strict`` False is recorded in ``refused`` and stands in as another value of the axis (its rows
    are marked invalid)."""
    out = []
    for name, spec in axes.items():
        vals = parse_axis(name, spec)
        if not vals:
            raise InputError("an axis needs at least one value", source=_SOURCE, field=name)
        numeric = name in NUMERIC_AXES and not any(_empty(v) for v in vals)
        ax = _Axis(name, vals, numeric)
        if numeric:
            conv = _as_int if name in INT_FIELDS else _as_float
            if strict:
                ax.values = [conv(name, v, _SOURCE) for v in vals]     # type and limits, once per value
            else:
                for i, v in enumerate(vals):
                    try:
                        ax.values.append(conv(name, v, _SOURCE))
                    except InputError as exc:
                        ax.values.append(None)
                        ax.refused[i] = str(exc)
                ok = [v for v in ax.values if v is not None]
                if not ok:
                    raise InputError(f"no valid value: {next(iter(ax.refused.values()))}", source=_SOURCE, field=name)
                ax.values = [ok[0] if v is None else v for v in ax.values]
        else:
            ax.values = [None] * len(vals)
        out.append(ax)
    return out


def _label(pairs) -> str:
    return f"{_SOURCE} ({', '.join(f'{k}={_show(v)}' for k, v in pairs)})" if pairs else _SOURCE


def _show(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return v


def _blocks(base: dict, axes: list[_Axis], strict: bool = True) -> list[_Block]:
    """Parse one record per group (and per looped value), recording canonical axis values. A group
    whose record is refused (or whose model does not split over its devices) raises, or with
    ``strict`` False becomes an invalid block (its rows marked)."""
    group = [a for a in axes if not a.numeric]
    numeric = [a for a in axes if a.numeric]
    blocks = []
    for gidx in itertools.product(*(range(len(a.raw)) for a in group)):
        gvals = {a.name: a.raw[i] for a, i in zip(group, gidx)}
        first = {a.name: a.values[0] for a in numeric}
        index = dict(zip((a.name for a in group), gidx))
        label = _label(list(gvals.items()))
        try:
            rec = _parse({**base, **gvals, **first}, list(gvals.items()), execs=True)
        except InputError as exc:
            if strict:
                raise
            # the first row may be the invalid one: any row of the group that parses will do (the
            # numeric axes are arrays; their invalid rows are marked by _check_block)
            rows = itertools.islice(itertools.product(*(a.values for a in numeric)), 1, 256)
            rec = next(filter(None, (_parse_or_none({**base, **gvals, **dict(zip((a.name for a in numeric), r))},
                                                    list(gvals.items())) for r in rows)), None)
            if rec is None:
                blocks.append(_Block(None, index, [], label=label, invalid=str(exc)))
                continue
        if rec.strategy == "tree" and rec.tree_shape == "optimal_for_hardware":
            # a tree searched per configuration: row by row (each row re-parsed)
            blocks.append(_Block(rec, index, [], rowwise=True, label=label))
        else:
            loop = [a for a in numeric if a.name in _TREE_LOOP] if rec.strategy == "tree" else []
            vec = [a.name for a in numeric if a not in loop]
            for lidx in itertools.product(*(range(len(a.values)) for a in loop)):
                lvals = {a.name: a.values[i] for a, i in zip(loop, lidx)}
                pairs = list(gvals.items()) + list(lvals.items())
                lindex = {**index, **dict(zip((a.name for a in loop), lidx))}
                try:
                    r = _parse({**base, **gvals, **first, **lvals}, pairs) if loop else rec
                except InputError as exc:
                    if strict:
                        raise
                    blocks.append(_Block(None, lindex, [], label=_label(pairs), invalid=str(exc)))
                    continue
                blocks.append(_Block(r, lindex, vec, label=_label(pairs)))
        for a, i in zip(group, gidx):
            if a.values[i] is None:
                a.values[i] = _canonical(getattr(rec, a.name))
    for a in group:                 # values only invalid groups had: as given
        a.values = [_canonical(r) if v is None else v for v, r in zip(a.values, a.raw)]
    return blocks


def _parse_or_none(d: dict, pairs):
    try:
        return _parse(d, pairs, execs=True)
    except InputError:
        return None


def _parse(d: dict, pairs, execs: bool = False) -> Record:
    """parse_record; with ``execs`` also build the model's and draft's execution (a model that does
    not split over the devices is refused here, before anything is evaluated)."""
    try:
        rec = parse_record(d, source=_label(pairs))
    except InputError:
        raise
    except (TypeError, ValueError) as exc:      # pragma: no cover - parse_record raises InputError
        raise InputError(str(exc), source=_label(pairs)) from None
    if execs:
        from costmodel.engine.evaluate import _execs
        try:
            _execs(rec)
        except InputError as exc:
            raise InputError(str(exc), source=_label(pairs)) from None
    return rec


def _canonical(v):
    if isinstance(v, tuple):
        return ",".join(_num_text(x) for x in v)
    return v


def _num_text(x) -> str:
    return repr(x) if isinstance(x, float) else str(x)


def _arrays_for(block: _Block, axes: dict, sl: dict | None = None) -> dict:
    """The vectorised axes as arrays shaped to broadcast: axis k of len(vec) dims."""
    vec = block.vec
    out = {}
    for k, name in enumerate(vec):
        v = np.asarray(axes[name].values, dtype=float)
        if sl and name in sl:
            v = v[sl[name]]
        shape = [1] * len(vec)
        shape[k] = v.shape[0]
        out[name] = v.reshape(shape)
    return out


def _check_block(block: _Block, arrays: dict, invalid=None, where=None) -> None:
    """Vectorised form of record.py's range checks and the checks that tie numeric fields
    together; the first offending row is re-parsed so the error is parse_record's own. With
    ``invalid`` (an :class:`InvalidRows`) the offending rows are marked there instead (``where``:
    the block's region of the grid)."""
    if not arrays:
        return
    rec = block.rec
    reasons = []

    def _or(a, b, why=None):
        reasons.append((b, why))
        return b if a is None else (a | b)

    def get(name):
        if name in arrays:
            return arrays[name]
        v = getattr(rec, name)
        return None if v is None else np.asarray(float(v))

    bad = None
    P, Ps = get("prompt_len"), get("shared_prefix_len")
    if "prompt_len" in arrays or "shared_prefix_len" in arrays:
        bad = _or(bad, Ps > P, "shared_prefix_len > prompt_len")
    tau, alpha, g = get("mean_accepted_tokens"), get("acceptance_rate"), get("gamma")
    if "acceptance_rate" in arrays:
        bad = _or(bad, (alpha < 0.0) | (alpha >= 1.0), "acceptance_rate outside [0, 1)")
    if "mean_accepted_tokens" in arrays:
        bad = _or(bad, tau < 1.0, "mean_accepted_tokens < 1")
    if rec.strategy == "speculative":
        if tau is not None and ({"mean_accepted_tokens", "gamma"} & arrays.keys()):
            bad = _or(bad, (tau < 1.0) | (tau > g + 1.0), "mean_accepted_tokens outside [1, gamma + 1]")
        if tau is not None and alpha is not None and ({"mean_accepted_tokens", "gamma", "acceptance_rate"}
                                                      & arrays.keys()):
            from costmodel.engine.acceptance import chain_tokens_per_step
            bad = _or(bad, np.abs(chain_tokens_per_step(alpha, g) - tau) > 0.05 * tau,
                      "acceptance_rate and mean_accepted_tokens disagree by more than 5%")
    if bad is None or not np.any(bad):
        return
    if invalid is not None:
        for mask, why in reasons:
            if np.any(mask):
                invalid.mark(where, why, mask)
        return
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    pos = np.unravel_index(int(np.argmax(np.broadcast_to(bad, shape))), shape)
    row = {name: arrays[name].reshape(-1)[pos[k] if arrays[name].shape[k] > 1 else 0]
           for k, name in enumerate(block.vec)}
    row = {k: (int(v) if k in INT_FIELDS else float(v)) for k, v in row.items()}
    d = {f: getattr(rec, f) for f in FIELD_NAMES if getattr(rec, f) is not None}
    d.update(row)
    parse_record(d, source=block.label + f" row {row}")       # raises with record.py's message
    raise InputError(f"invalid combination of values {row}", source=block.label)   # pragma: no cover


# ----------------------------------------------------------------------------------------- columns

def _kind(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "b"
    if isinstance(v, (int, np.integer)):
        return "i"
    if isinstance(v, (float, np.floating)):
        return "f"
    if isinstance(v, np.ndarray):
        return _kind_of(v)
    return "o"


def _kind_of(a) -> str:
    return {"b": "b", "i": "i", "u": "i", "f": "f"}.get(a.dtype.kind, "o")


#: text columns that chunks deliver as int8 indices into roofline.BOUNDS (evaluate_arrays(bound_codes=True))
CODE_KEYS = ("bound", "prefill_bound")
#: the text of each code; -1 (a row no block wrote) reads as None
_CODE_TEXT = np.asarray(BOUNDS + (None,), dtype=object)


class _Columns:
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

    def put(self, key, where, rows, value):
        if key in CODE_KEYS:
            self._put_code(key, where, rows, value)
            return
        a = self.cols.get(key)
        kind = _kind(value)
        if a is None:
            if kind == "f":
                a = np.full(self.shape, np.nan) if self.multi else np.empty(self.shape)
            elif kind in "bi":
                a = np.zeros(self.shape, dtype=bool if kind == "b" else np.int64)
            else:
                a = np.empty(self.shape, dtype=object)      # None-filled
            self.cols[key], self.wheres[key], self.written[key] = a, [], 0
        else:
            have = _kind_of(a)
            if have != kind and not (have == "f" and kind in "bi") and have != "o":
                a = self._widen(key, kind)
        a[where] = value
        self.written[key] += rows
        if self.multi:
            self.wheres[key].append(where)

    def _put_code(self, key, where, rows, value):
        a = self.cols.get(key)
        if a is None:
            a = np.full(self.shape, -1, dtype=np.int8) if self.multi else np.empty(self.shape, dtype=np.int8)
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
        a, have = self.cols[key], _kind_of(self.cols[key])
        if have == "i" and kind == "f":
            new = a.astype(float)
        else:
            new = a.astype(object)
        self._fill_missing(key, new)
        self.cols[key] = new
        return new

    def _fill_missing(self, key, a):
        if self.written[key] >= self.n or _kind_of(a) in "bi":
            return
        mask = np.zeros(self.shape, dtype=bool)
        for w in self.wheres[key]:
            mask[w] = True
        a[~mask] = np.nan if _kind_of(a) == "f" else None

    def blank(self, mask) -> None:
        """Rows where ``mask`` holds have no outputs: NaN (bool and int columns become object and
        float), None in text columns."""
        for key, a in list(self.cols.items()):
            kind = _kind_of(a)
            if kind in "bi":
                a = a.astype(float) if kind == "i" else a.astype(object)
            a[mask] = np.nan if _kind_of(a) == "f" else None
            self.cols[key] = a

    def finish(self):
        for key, a in list(self.cols.items()):
            if key in self.coded:
                self.cols[key] = _CODE_TEXT[a]
                continue
            if self.written[key] < self.n and _kind_of(a) in "bi":
                new = a.astype(float) if _kind_of(a) == "i" else a.astype(object)
                self._fill_missing(key, new)
                self.cols[key] = new


# ----------------------------------------------------------------------------------------- engine

def _plan(base: dict, axes_in: dict, on_invalid: str = "error"):
    """Parse the axes and the groups' records and run every check, before any evaluation. Returns
    (axes, axes by name, names, blocks, invalid rows): with ``on_invalid="error"`` the first
    invalid row raises; otherwise invalid rows are recorded in an :class:`InvalidRows`."""
    strict = on_invalid == "error"
    axes_l = _plan_axes(base, axes_in, strict)
    axes = {a.name: a for a in axes_l}
    blocks = _blocks(base, axes_l, strict)
    names = [a.name for a in axes_l]
    invalid = InvalidRows(tuple(len(a.raw) for a in axes_l))
    for k, a in enumerate(axes_l):
        for i, why in a.refused.items():
            invalid.mark(tuple(i if j == k else slice(None) for j in range(len(axes_l))), why)
    for b in blocks:
        region = tuple(b.index.get(n, slice(None)) for n in names)
        if b.invalid is not None:
            invalid.mark(region, b.invalid)
        elif b.rowwise:
            for where, row in _rows(b, axes, names):
                try:
                    parse_record(row, source=b.label)
                except InputError as exc:
                    if strict:
                        raise
                    invalid.mark(where, str(exc))
        else:
            _check_block(b, _arrays_for(b, axes), None if strict else invalid, region)
    return axes_l, axes, names, blocks, invalid


def _rows(b: _Block, axes: dict, names: list):
    """(grid index, full record dict) of each row of a row-by-row block."""
    base_where = [b.index.get(n, slice(None)) for n in names]
    free = [n for n in names if n not in b.index]
    fixed = {f: getattr(b.rec, f) for f in FIELD_NAMES if getattr(b.rec, f) is not None}
    for idx in itertools.product(*(range(len(axes[n].values)) for n in free)):
        where = list(base_where)
        row = dict(fixed)
        for n, i in zip(free, idx):
            where[names.index(n)] = i
            row[n] = axes[n].values[i]
        yield tuple(where), row


def _pieces(b: _Block, axes: dict, names: list, chunk_rows: int):
    """(grid index, rows, arrays, record) of each evaluate_arrays call of a block."""
    if b.rowwise:
        for where, row in _rows(b, axes, names):
            yield where, 1, None, row
        return
    base_where = [b.index.get(n, slice(None)) for n in names]
    if not b.vec:
        yield tuple(base_where), 1, {}, b.rec
        return
    lens = [len(axes[n].values) for n in b.vec]
    rows = int(np.prod(lens, dtype=np.int64))
    # cut along the first vectorised axis whose trailing block fits in chunk_rows
    trailing = rows
    for k in range(len(b.vec)):
        trailing //= lens[k]
        if trailing <= chunk_rows:
            break
    per = max(1, chunk_rows // max(trailing, 1))
    cut, outer = b.vec[k], b.vec[:k]
    for oidx in itertools.product(*(range(len(axes[n].values)) for n in outer)):
        for start in range(0, lens[k], per):
            stop = min(start + per, lens[k])
            sl = {n: slice(i, i + 1) for n, i in zip(outer, oidx)}
            sl[cut] = slice(start, stop)
            where = list(base_where)
            for n, s in sl.items():
                where[names.index(n)] = s
            yield tuple(where), (stop - start) * trailing, _arrays_for(b, axes, sl), b.rec


def _evaluate_grid(base: dict, axes_in: dict, chunk_rows: int, progress=None, workers: int = 1,
                   on_invalid: str = "error"):
    axes_l, axes, names, blocks, invalid = _plan(base, axes_in, on_invalid)
    shape = tuple(len(a.raw) for a in axes_l)
    total = int(np.prod(shape, dtype=np.int64))
    cols = _Columns(shape, len(blocks) > 1)
    done = 0
    bad = invalid.mask
    strict = on_invalid == "error"
    tasks = ((b, piece) for b in blocks if b.invalid is None for piece in _pieces(b, axes, names, chunk_rows)
             if bad is None or not (b.rowwise and bad[piece[0]]))
    done += sum(int(np.prod([len(axes[n].values) for n in names if n not in b.index], dtype=np.int64))
                for b in blocks if b.invalid is not None)
    run = _run_piece if strict else _run_piece_or_reason
    if workers > 1 and len(blocks) == 1 and not blocks[0].rowwise and can_fork():
        # one group: its chunks on forked processes writing into shared columns (_sweep_fork)
        tasks = list(tasks)
        if len(tasks) >= 2 * workers:
            try:
                got = evaluate_forked(tasks, _run_piece, lambda t: (t[1][0], t[1][1]), shape, axes, workers,
                                      progress, total, CODE_KEYS)
            except InputError:
                if strict:
                    raise
                got = None                # a piece is invalid: in this process, marking it
            if got is not None:
                cols.cols, tasks = got, []
                cols.written = dict.fromkeys(got, cols.n)
                cols.coded = {k for k in CODE_KEYS if k in got}
    for (b, (where, rows, _arrays, _rec)), res in _map(run, tasks, workers):
        if isinstance(res, str):
            invalid.mark(where, res)
            res = {}
        for key, v in res.items():
            if key not in axes:
                cols.put(key, where, rows, v)
        done += rows
        if progress is not None:
            progress(done, total)
    cols.finish()
    if invalid.mask is not None:
        cols.blank(invalid.mask)
    axis_cols = {}
    for k, a in enumerate(axes_l):
        vals = _axis_array(a)
        s = [1] * len(shape)
        s[k] = len(vals)
        axis_cols[a.name] = np.broadcast_to(vals.reshape(s), shape)
    return names, axis_cols, cols, invalid


def _run_piece_or_reason(task):
    """_run_piece, or the reason (text) when the piece's rows are invalid."""
    try:
        with np.errstate(all="ignore"):
            return _run_piece(task)
    except InputError as exc:
        return str(exc)


def _run_piece(task) -> dict:
    b, (_where, _rows, arrays, rec) = task
    try:
        return _evaluate_piece(rec, arrays)
    except InputError as exc:
        raise InputError(str(exc), source=b.label) from None


def _map(fn, items, workers: int):
    """(item, fn(item)) in order; with workers > 1 on a thread pool (numpy releases the GIL in its
    loops), keeping at most 2·workers items in flight."""
    if workers <= 1:
        for it in items:
            yield it, fn(it)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="costmodel-sweep") as pool:
        window = deque()
        for it in items:
            window.append((it, pool.submit(fn, it)))
            if len(window) >= 2 * workers:
                it0, fut = window.popleft()
                yield it0, fut.result()
        while window:
            it0, fut = window.popleft()
            yield it0, fut.result()


def _axis_array(a: _Axis) -> np.ndarray:
    vals = a.values
    if a.numeric and a.refused:          # a refused value shows as given (NaN when not a number)
        vals = list(vals)
        for i in a.refused:
            raw = a.raw[i]
            vals[i] = raw if isinstance(raw, (int, float)) and not isinstance(raw, bool) else _number_or_nan(raw)
        ints = a.name in INT_FIELDS and all(isinstance(v, int) for v in vals)
        return np.asarray(vals, dtype=np.int64 if ints else float)
    if a.numeric:
        return np.asarray(vals, dtype=np.int64 if a.name in INT_FIELDS else float)
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


def _evaluate_piece(rec, arrays) -> dict:
    """evaluate()'s keys for one piece: arrays from evaluate_arrays, the record-level keys
    (model, n_devices_total, tree_parents, …) from evaluate() on the piece's record."""
    if arrays is None or not arrays:
        return _flat(evaluate(rec))
    with operator_rows(False):            # the per-operator breakdown is not a column
        res = evaluate_arrays(rec, arrays, bound_codes=True)
    res.pop("_extras", None)
    res.pop("_step_ops", None)
    out = {}
    for k, v in _record_keys(rec).items():
        out[k] = res.pop(k) if k in res else v
    out.update(res)
    return out


_RECORD_KEYS: dict = {}


def _record_keys(rec: Record) -> dict:
    """evaluate(rec) with its keys in order (values used for the keys evaluate_arrays lacks)."""
    try:
        hit = _RECORD_KEYS.get(rec)
    except TypeError:                     # a field holds an unhashable object (a Hardware, …)
        return _flat(evaluate(rec))
    if hit is None:
        if len(_RECORD_KEYS) > 1024:
            _RECORD_KEYS.clear()
        hit = _RECORD_KEYS[rec] = _flat(evaluate(rec))
    return hit


def _flat(d: dict) -> dict:
    return {k: (_canonical(tuple(v)) if isinstance(v, list) else v) for k, v in d.items()
            if not isinstance(v, dict)}


# ----------------------------------------------------------------------------------------- public

def sweep(base_record=None, *, engine: str = "numpy", scheduler=None, chunk_rows: int | None = None,
          workers: int | None = None, output=None, progress=None, on_invalid: str = "error", **axes):
    """Evaluate the Cartesian grid of ``axes`` over ``base_record`` -> ``pandas.DataFrame``.

    ``base_record``: a record mapping (DESIGN §4) with the fields that do not vary.
    ``axes``: field -> values (list/range/array, or text ``"1,8,64"`` / ``"16:16000:16"``; see
    :func:`parse_axis`). Row i equals ``evaluate(base_record | row i's axis values)``: the same
    formulas and floating-point operations, run on arrays (module docstring).

    ``engine``: ``"numpy"`` (in process) or ``"dask"`` (chunks on a ``dask.distributed``
    cluster: ``scheduler`` None starts a ``LocalCluster``; an address such as
    ``"tcp://host:8786"`` or a ``distributed.Client`` uses that cluster).
    ``chunk_rows``: rows per evaluation call (default 32768: arrays that stay in cache) and per
    Dask task (default 2**20). ``workers``: processes (forked, writing into shared columns) or,
    where forking is not safe, threads evaluating chunks (default: the CPU count, at most 8; 1 =
    this process alone); see the module docstring.
    ``output``: also write the rows to ``.csv`` or ``.parquet``. With the Dask engine the result
    is not collected: a ``.csv`` path is streamed chunk by chunk, any other path becomes a
    directory of Parquet parts written by the workers, and the path is returned.
    ``progress``: ``callable(rows_done, rows_total)``.
    ``on_invalid``: ``"error"`` (default: an invalid row refuses the grid), ``"mark"`` (its outputs
    NaN / None and the reason in an ``invalid_reason`` column) or ``"drop"`` (left out); see
    :mod:`costmodel.analysis.sweep_invalid`.
    """
    base = _base_dict(base_record)
    on_invalid = check_on_invalid(on_invalid)
    if chunk_rows is not None and (not isinstance(chunk_rows, (int, np.integer)) or chunk_rows < 1):
        raise InputError(f"chunk_rows must be a positive integer, got {chunk_rows!r}", source=_SOURCE)
    if engine in (None, "numpy", "local"):
        df = _sweep_local(base, axes, int(chunk_rows or CHUNK_ROWS), progress, _workers(workers), on_invalid)
        if output is not None:
            write_frame(df, output)
        return df
    if engine == "dask":
        return _sweep_dask(base, axes, scheduler=scheduler, chunk_rows=int(chunk_rows or DEFAULT_CHUNK_ROWS),
                           output=output, progress=progress, workers=_workers(workers, 1), on_invalid=on_invalid)
    raise InputError(f"unknown engine {engine!r}", source=_SOURCE, field="engine", allowed=", ".join(ENGINES))


def _workers(n, default=None) -> int:
    if n is None:
        return default if default is not None else max(1, min(os.cpu_count() or 1, 8))
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"workers must be a positive integer, got {n!r}", source=_SOURCE, field="workers")
    return int(n)


def _base_dict(base_record) -> dict:
    if base_record is None:
        return {}
    if isinstance(base_record, Record):
        return {f: getattr(base_record, f) for f in FIELD_NAMES if getattr(base_record, f) is not None}
    if not isinstance(base_record, dict):
        raise InputError(f"base_record must be a mapping of field: value, got {type(base_record).__name__}",
                         source=_SOURCE)
    return dict(base_record)


def _sweep_local(base: dict, axes: dict, chunk_rows: int, progress=None, workers: int = 1,
                 on_invalid: str = "error"):
    import pandas as pd

    names, axis_cols, cols, invalid = _evaluate_grid(base, axes, chunk_rows, progress, workers, on_invalid)
    data = {n: np.ascontiguousarray(axis_cols[n]).reshape(-1) for n in names}
    for k, a in cols.cols.items():
        data[k] = a.reshape(-1)
    if on_invalid == "mark":
        data[REASON_COLUMN] = (np.full(cols.n, None, dtype=object) if invalid.reasons is None
                               else invalid.reasons.reshape(-1))
    for k, a in data.items():     # text stays object dtype: no conversion pass over the rows
        if a.dtype == object:
            data[k] = pd.Series(a, dtype=object, copy=False)
    df = pd.DataFrame(data, copy=False)
    if on_invalid == "drop" and invalid.mask is not None:
        df = df[~invalid.mask.reshape(-1)].reset_index(drop=True)
    return df


def write_frame(df, path, append: bool = False) -> str:
    """Write ``df`` to ``path`` (``.parquet`` with pyarrow, or ``.csv``); returns the path."""
    p = os.fspath(path)
    low = p.lower()
    if low.endswith((".parquet", ".pq")):
        _need_parquet()
        df.to_parquet(p, index=False)
    elif low.endswith(".csv"):
        _write_csv(df, p, append)
    else:
        raise InputError("unknown output type", source=p, allowed="a path ending in .csv or .parquet")
    return p


def _write_csv(df, path: str, append: bool) -> None:
    """CSV with pyarrow's writer when installed (about 8x faster than pandas on wide frames; booleans
    as true/false), else pandas'. Values round-trip exactly either way."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        df.to_csv(path, index=False, mode="a" if append else "w", header=not append)
        return
    table = pa.Table.from_pandas(df, preserve_index=False)
    try:
        opts = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    except TypeError:                       # older pyarrow: strings quoted
        opts = pacsv.WriteOptions(include_header=False)
    with open(path, "ab" if append else "wb") as fh:
        if not append:
            fh.write((",".join(str(c) for c in df.columns) + "\n").encode())
        pacsv.write_csv(table, fh, opts)


def _need_parquet():
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError("writing Parquet needs pyarrow, which is not installed; install it with "
                         "pip install 'costmodel[sweep]' (or pip install pyarrow), or write .csv",
                         source=_SOURCE, field="output") from None


# ----------------------------------------------------------------------------------------- dask

def _chunks(axes: dict, chunk_rows: int) -> list[dict]:
    """Sub-grids of about ``chunk_rows`` rows whose concatenation is the grid in row order: the
    leading axes fixed to one value, a range of the next axis, the trailing axes whole."""
    names = list(axes)
    vals = [parse_axis(n, axes[n]) for n in names]
    lens = [len(v) for v in vals]
    if not names:
        return [{}]
    j = 0
    for j in range(len(names)):
        if int(np.prod(lens[j + 1:], dtype=np.int64)) <= chunk_rows:
            break
    per = max(1, chunk_rows // int(np.prod(lens[j + 1:], dtype=np.int64)))
    out = []
    for prefix in itertools.product(*(range(n) for n in lens[:j])):
        for start in range(0, lens[j], per):
            sub = {}
            for n, v, i in zip(names[:j], vals[:j], prefix):
                sub[n] = [v[i]]
            sub[names[j]] = vals[j][start:start + per]
            for n, v in zip(names[j + 1:], vals[j + 1:]):
                sub[n] = v
            out.append(sub)
    return out


def _schema(base: dict, axes: dict, on_invalid: str = "error", nullable_bool: bool = False) -> tuple[list, dict]:
    """Columns and dtypes every chunk is conformed to (so Parquet parts share one schema). A bool
    column that some rows lack is ``object`` (True / False / None), or with ``nullable_bool``
    pandas' ``boolean``."""
    axes_l, axes_d, names, blocks, invalid = _plan(base, axes, on_invalid)
    blocks = [b for b in blocks if b.invalid is None]
    cols: list = list(names)
    kinds: dict = {n: _kind_of(_axis_array(a)) for n, a in zip(names, axes_l)}
    seen: dict = {}
    for b in blocks:
        if b.rowwise:
            rows = (row for where, row in _rows(b, axes_d, names) if invalid.mask is None or not invalid.mask[where])
            row = next(rows, None)
            if row is None:
                continue
            keys = _flat(evaluate(row))
        else:
            keys = _record_keys(b.rec)
        for k, v in keys.items():
            if k in axes_d:
                continue
            if k not in kinds:
                cols.append(k)
                kinds[k] = _kind(v)
            elif kinds[k] != _kind(v):
                kinds[k] = "f" if {kinds[k], _kind(v)} <= {"i", "f"} else "o"
            seen[k] = seen.get(k, 0) + 1
    for k, c in seen.items():
        if (c < len(blocks) or on_invalid != "error") and kinds[k] in "bi":
            kinds[k] = "f" if kinds[k] == "i" else ("n" if nullable_bool else "o")   # NaN / None where no value
    if on_invalid == "mark":
        cols.append(REASON_COLUMN)
        kinds[REASON_COLUMN] = "o"
    dtypes = {k: {"f": "float64", "i": "int64", "b": "bool", "o": "object", "n": "boolean"}[kinds[k]] for k in cols}
    return cols, dtypes


def _dask_task(base: dict, sub_axes: dict, workers: int, columns: list, dtypes: dict, part_path,
               on_invalid: str = "error"):
    """One chunk on a worker: the in-process sweep, conformed to the schema; written to
    ``part_path`` (returns the row count) or returned."""
    df = _sweep_local(base, sub_axes, CHUNK_ROWS, None, workers, on_invalid)
    df = df.reindex(columns=columns).astype(dtypes, copy=False)
    if part_path is None:
        return df
    df.to_parquet(part_path, index=False)
    return len(df)


def _prepare_parts_dir(out: str, n: int) -> list:
    """Create the Parquet directory (a local path, or an fsspec URL such as s3://bucket/grid.parquet),
    remove parts of an earlier run, and return the n part paths (absolute, as workers see them)."""
    if "://" in out:
        from fsspec.core import url_to_fs
        fs, root = url_to_fs(out)
        fs.makedirs(root, exist_ok=True)
        for f in fs.ls(root, detail=False):
            name = f.rstrip("/").rsplit("/", 1)[-1]
            if name.startswith("part.") and name.endswith(".parquet"):
                fs.rm(f)
        return [f"{out.rstrip('/')}/part.{i:05d}.parquet" for i in range(n)]
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):                     # parts of an earlier run would mix in
        if f.startswith("part.") and f.endswith(".parquet"):
            os.remove(os.path.join(out, f))
    return [os.path.join(os.path.abspath(out), f"part.{i:05d}.parquet") for i in range(n)]


def _sweep_dask(base: dict, axes: dict, scheduler, chunk_rows: int, output, progress, workers: int = 1,
                on_invalid: str = "error"):
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("engine='dask' needs dask.distributed, which is not installed; install it with "
                         "pip install 'costmodel[dask]' (or pip install 'dask[distributed]' pyarrow)",
                         source=_SOURCE, field="engine") from None
    import pandas as pd

    columns, dtypes = _schema(base, axes, on_invalid)         # validates the whole grid here, before any task
    chunks = _chunks(axes, chunk_rows)
    sizes = [int(np.prod([len(parse_axis(n, v)) for n, v in c.items()], dtype=np.int64)) for c in chunks]
    total = sum(sizes)
    out = None if output is None else os.fspath(output)
    to_csv = out is not None and out.lower().endswith(".csv")
    parts = None
    if out is not None and not to_csv:
        _need_parquet()
        parts = _prepare_parts_dir(out, len(chunks))

    cluster = client = None
    if isinstance(scheduler, Client):
        client = scheduler
    elif scheduler is None:
        cluster = LocalCluster(processes=True, threads_per_worker=1, dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(f"cannot reach the Dask scheduler: {exc}", source=_SOURCE, field="scheduler",
                             value=str(scheduler),
                             allowed="the address a running 'dask scheduler' prints, e.g. tcp://10.0.0.5:8786, "
                                     "or None for a local cluster") from None
    try:
        futures = [client.submit(_dask_task, base, c, workers, columns, dtypes,
                                 None if parts is None else parts[i], on_invalid, pure=False)
                   for i, c in enumerate(chunks)]
        index = {f.key: i for i, f in enumerate(futures)}
        if progress is not None and not to_csv:
            done = 0
            for f in as_completed(futures):
                done += sizes[index[f.key]]
                progress(done, total)
        if parts is not None:
            client.gather(futures)
            return out
        if to_csv:
            done = 0
            for i, f in enumerate(futures):       # in row order, one chunk in memory at a time
                write_frame(f.result(), out, append=i > 0)
                f.release()
                done += sizes[i]
                if progress is not None:
                    progress(done, total)
            return out
        frames = client.gather(futures)
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    finally:
        if client is not scheduler:
            client.close()
        if cluster is not None:
            cluster.close()
