"""sweep(base_record, **axes) -> pandas.DataFrame: the Cartesian grid of the axes, vectorised.

    >>> import costmodel
    >>> df = costmodel.sweep({"model": "llama-2-7b", "hardware": "a100-80gb", "prompt_len": 512},
    ...                      batch_size=[1, 8, 64], hardware=["a100-80gb", "h100-sxm"])
    >>> len(df)
    6

Rows are the Cartesian product of the axes in the order given (the last axis varies fastest,
like ``itertools.product``); each row equals ``evaluate(base_record | that row's axis values)``.
Columns: the axes (their parsed values), then every key ``evaluate()`` returns (the outputs of
docs/design.md and the breakdowns). Where an output key has an axis's name (``shared_prefix_len``, ``tree_nodes``,
``tree_depth``), the column holds the axis value; ``evaluate()`` would report the resolved one.

How it is evaluated (no Python loop per row):

* The grid is grouped by the axes that fix the model, hardware, runtime, strategy, dtypes, devices,
  tree shape, … (everything but :data:`costmodel.engine.evaluate.NUMERIC_AXES`). Each group is one call of
  :func:`costmodel.engine.evaluate.evaluate_arrays` with the numeric axes as numpy arrays shaped to
  broadcast against each other (batch (n, 1) × prompt (1, m)), so work that depends on one axis
  only is done once per value of that axis. The ``hardware`` (a HardwareStack), ``n_devices`` (device
  counts), ``weight_dtype`` (WeightDtypes) and ``model`` (a ModelStack) axes are arrays too, where the
  engine prices their values alike (:mod:`costmodel.analysis.sweep_stack`). Groups are cut into chunks of ``chunk_rows`` rows
  (``CHUNK_ROWS`` by default: arrays that stay in the CPU caches) along their first vectorised axis; the
  per-operator breakdown (``Cost.ops``) is not built. With ``workers`` > 1 a one-group grid is
  evaluated on forked processes that take chunks from a shared work queue and pass each chunk's
  columns through a small shared buffer into this process's columns (:mod:`costmodel.fast.sweep_fork`:
  threads do not help, the Python between numpy calls holds the GIL), a grid of several groups on
  forked processes that send their chunks' results back (by default only a grid evaluated row by
  row: sending arrays back costs more than evaluating them); on platforms without ``fork`` or in a
  process with other threads running, on threads.
* For token trees the acceptance figures pick the tree's shape, so ``acceptance_rate`` and
  ``mean_accepted_tokens`` are looped over there; ``tree_shape=optimal_for_hardware`` searches a
  tree per configuration and is evaluated row by row.
* Validation: each group's record goes through :func:`costmodel.inputs.record.parse_record` (a real
  row of the grid: the group's values and the first value of every numeric axis); each distinct
  numeric axis value is converted once with its type and range from :mod:`costmodel.inputs.fields`;
  the rules that tie numeric fields together (:mod:`costmodel.inputs.rules`: ``shared_prefix_len <=
  prompt_len``, τ <= γ+1, α and τ agreeing) run vectorised over the grid, and the first offending
  row is re-parsed so that the message is exactly ``parse_record``'s, naming the axis.

``engine="dask"`` cuts the grid into chunks of about ``chunk_rows`` rows and evaluates them on a
``dask.distributed`` cluster (a ``LocalCluster`` by default, or the scheduler address / Client
given as ``scheduler``); with ``output`` the workers write partitioned Parquet
(``part.00000.parquet``, …) so results larger than memory never pass through one process. See
``docs/sweep.md``.

Modules: :mod:`~costmodel.analysis.sweep_grid` (axes, blocks, array validation),
:mod:`~costmodel.analysis.sweep_columns` (output columns), :mod:`~costmodel.analysis.sweep_output`
(CSV / Parquet), :mod:`~costmodel.analysis.sweep_invalid` (``on_invalid``),
:mod:`~costmodel.analysis.sweep_dask` (chunks, their schema, the Dask engine),
:mod:`~costmodel.analysis.sweep_stream` (a file written chunk by chunk); this one evaluates the
blocks (in process or forked) and assembles the frame.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import os

import numpy as np

from costmodel.analysis.sweep_invalid import REASON_COLUMN, InvalidRows, check_on_invalid
from costmodel.analysis.sweep_columns import CODE_KEYS, Columns, axis_array, axis_column, frame_column
from costmodel.analysis.sweep_grid import Block, arrays_for, canonical_value, \
    check_block, grid_size, group_blocks, parse_axis, plan_axes, positions, runs
from costmodel.analysis.sweep_output import _SOURCE, check_output, write_frame
from costmodel.analysis.sweep_stack import member_tails, stack_model_blocks
from costmodel.fast.arrays import row_buffers
from costmodel.fast.sweep_fork import can_fork, evaluate_forked, map_forked
from costmodel.errors import InputError
from costmodel.engine.evaluate import _execs, check_context, evaluate, evaluate_arrays, record_head, record_tail
from costmodel.inputs.model import ModelStack, load_model, stack_models
from costmodel.engine.pass_memo import shared_passes
from costmodel.engine.roofline import operator_rows
from costmodel.inputs.fields import FIELD_NAMES
from costmodel.inputs.dtypes import WeightDtypes
from costmodel.inputs.hardware import HardwareStack, stack_hardware
from costmodel.inputs.record import Record, parse_record, with_fields

__all__ = ["sweep", "parse_axis", "grid_size", "DEFAULT_CHUNK_ROWS"]

#: rows per evaluate_arrays call in process: 65536-element arrays (512 KiB) stay in the caches,
#: which makes each array operation 2-3x faster than on million-element arrays, and are large
#: enough that the ~1 ms of Python per evaluation is a small part of it (32768 rows: ~10 % slower
#: on the 1 M-row sweeps of benchmarks/bench_goals.py, 262144: ~40 % slower)
CHUNK_ROWS = 1 << 16
#: rows per Dask task (each task evaluates its rows in CHUNK_ROWS pieces): 2**20 rows of ~45
#: columns is ~0.4 GB of results per task
DEFAULT_CHUNK_ROWS = 1 << 20
ENGINES = ("numpy", "dask")


# ----------------------------------------------------------------------------------------- engine

def _plan(base: dict, axes_in: dict, on_invalid: str = "error", in_memory: bool = True):
    """Parse the axes and the groups' records and run every check, before any evaluation. Returns
    (axes, axes by name, names, blocks, invalid rows): with ``on_invalid="error"`` the first
    invalid row raises; otherwise invalid rows are recorded in an :class:`InvalidRows`."""
    strict = on_invalid == "error"
    axes_l = plan_axes(base, axes_in, strict, in_memory)
    axes = {a.name: a for a in axes_l}
    blocks = group_blocks(base, axes_l, strict)
    names = [a.name for a in axes_l]
    invalid = InvalidRows(tuple(len(a.raw) for a in axes_l))
    for k, a in enumerate(axes_l):
        for i, why in a.refused.items():
            invalid.mark(tuple(i if j == k else slice(None) for j in range(len(axes_l))), why)
    # refused groups (they do not overlap one another, nor the blocks below): marked together
    invalid.mark_indexed(names, [(b.index, b.invalid) for b in blocks if b.invalid is not None and not b.members])
    for b in blocks:
        if b.invalid is not None:
            if b.members:
                invalid.mark(b.where(names), b.invalid)
            continue
        region = b.where(names)
        if b.rowwise:
            for where, row in _rows(b, axes, names):
                try:
                    r = parse_record(row, source=b.label)
                    check_context(r, load_model(r.model))
                except InputError as exc:
                    if strict:
                        raise
                    invalid.mark(where, str(exc))
        else:
            check_block(b, arrays_for(b, axes), None if strict else invalid, [r for r, _k, _s in runs(region)])
    # models that the engine prices alike: one block each run (after the checks above, which read
    # each model's own block: its rows, its refusals and their order are as given)
    return axes_l, axes, names, stack_model_blocks(blocks, axes_l), invalid


def _rows(b: Block, axes: dict, names: list):
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


def _pieces(b: Block, axes: dict, names: list, chunk_rows: int, made: dict | None = None):
    """(grid index, rows, arrays, record) of each evaluate_arrays call of a block (``made``: see
    :func:`_piece_record`)."""
    if b.rowwise:
        for where, row in _rows(b, axes, names):
            yield where, 1, None, row
        return
    base_where = list(b.where(names))
    if not b.vec:
        yield tuple(base_where), 1, {}, b.rec
        return
    lens = [len(b.members[n]) if n in b.members else len(axes[n].values) for n in b.vec]
    rows = int(np.prod(lens, dtype=np.int64))
    # cut along the first vectorised axis whose trailing block fits in chunk_rows
    trailing = rows
    for k in range(len(b.vec)):
        trailing //= lens[k]
        if trailing <= chunk_rows:
            break
    per = max(1, chunk_rows // max(trailing, 1))
    cut, outer = b.vec[k], b.vec[:k]
    for oidx in itertools.product(*(range(n) for n in lens[:k])):
        for start in range(0, lens[k], per):
            stop = min(start + per, lens[k])
            sl = {n: slice(i, i + 1) for n, i in zip(outer, oidx)}
            sl[cut] = slice(start, stop)
            where = list(base_where)
            for n, s in sl.items():
                where[names.index(n)] = positions(b.members[n][s]) if n in b.members else s
            yield tuple(where), (stop - start) * trailing, arrays_for(b, axes, sl), _piece_record(b, sl, made)


def _piece_record(b: Block, sl: dict, made: dict | None = None):
    """The block's record with its member axes for the piece: ``hardware`` a HardwareStack,
    ``n_devices`` an array of device counts, ``weight_dtype`` a WeightDtypes, ``model`` a ModelStack
    (one member: the value itself). ``made``: the stacks built so far in this grid, by members and
    shape, so that pieces of different blocks over the same members hold the same object (they hash
    by identity: engine.pass_memo's keys)."""
    if not b.members:
        return b.rec
    changes = {}
    for name, values in (("hardware", b.stack), ("n_devices", b.counts), ("weight_dtype", b.dtypes),
                         ("model", b.models)):
        if name in b.members:
            chosen = values[sl.get(name, slice(None))]
            shape = [1] * len(b.vec)
            shape[b.vec.index(name)] = len(chosen)
            if name == "n_devices":
                changes[name] = np.asarray(chosen, dtype=np.int64).reshape(shape)
            elif name in ("weight_dtype", "model") and len(chosen) == 1:
                changes[name] = chosen[0]
            else:
                # devices by identity (not hashable): the blocks' loaded devices, alive with ``made``;
                # dtypes and models by their values
                key = (name, tuple(map(id, chosen)) if name == "hardware" else tuple(chosen), tuple(shape))
                got = None if made is None else made.get(key)
                if got is None:
                    got = WeightDtypes(tuple(chosen), tuple(shape)) if name == "weight_dtype" else \
                        stack_models([load_model(m) for m in chosen], shape) if name == "model" else \
                        stack_hardware(chosen, shape)
                    if made is not None:
                        made[key] = got
                changes[name] = got
    return with_fields(b.rec, **changes)


def _evaluate_grid(base: dict, axes_in: dict, chunk_rows: int, progress=None, workers: int | None = 1,
                   on_invalid: str = "error"):
    axes_l, axes, names, blocks, invalid = _plan(base, axes_in, on_invalid)
    if workers is None:       # the default: the CPU count, one process for several groups over arrays
        valid = [b for b in blocks if b.invalid is None]
        workers = 1 if len(valid) > 1 and not all(b.rowwise for b in valid) else _workers(None)
    shape = tuple(len(a.raw) for a in axes_l)
    total = int(np.prod(shape, dtype=np.int64))
    cols = Columns(shape, len(blocks) > 1)
    done = 0
    bad = invalid.mask
    strict = on_invalid == "error"
    made: dict = {}
    tasks = ((b, piece) for b in blocks if b.invalid is None for piece in _pieces(b, axes, names, chunk_rows, made)
             if bad is None or not (b.rowwise and bad[piece[0]]))
    done += sum(math.prod(len(axes[n].values) for n in names if n not in b.index)
                for b in blocks if b.invalid is not None)
    run = _run_piece if strict else _run_piece_or_reason
    if workers > 1 and len(blocks) == 1 and not blocks[0].rowwise and can_fork():
        # one group: its chunks on forked processes, gathered into this process's columns (sweep_fork)
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
                cols.adopt(got)
                tasks = []
        done_pairs = _map(run, tasks, workers)
    elif workers > 1 and can_fork():
        # several groups: dealt to forked processes, their results gathered here in grid order
        tasks = list(tasks)
        done_pairs = zip(tasks, map_forked(run, tasks, workers)) if len(tasks) >= 2 * workers else \
            _map(run, tasks, 1)
    else:
        done_pairs = _map(run, tasks, workers)
    for (b, (where, rows, _arrays, _rec)), res in done_pairs:
        for w, k, (s, e) in ((r, k, se or (0, 1)) for r, k, se in runs(where)):
            if isinstance(res, str):
                invalid.mark(w, res)
                continue
            n = 1 if k is None else len(where[names.index("hardware")])
            for key, v in res.items():
                if key not in axes:
                    cols.put(key, w, rows * (e - s) // n, v if k is None else _run_of(v, k, s, e, len(b.vec)))
            cols.wrote(w)
        done += rows
        if progress is not None:
            progress(done, total)
    cols.finish(invalid.mask)             # the invalid rows' outputs blanked (NaN, no text)
    axis_cols = {a.name: axis_column(axis_array(a), k, shape) for k, a in enumerate(axes_l)}
    return names, axis_cols, cols, invalid


def _run_of(v, k: int, start: int, stop: int, ndim: int):
    """Elements start:stop along dimension k (of ``ndim``, numpy's right-aligned broadcasting) of a
    piece's output ``v``; ``v`` itself where it is constant along that dimension."""
    a = np.asarray(v)
    kk = k - (ndim - a.ndim)
    if kk < 0 or a.shape[kk] == 1:
        return v
    return a[(slice(None),) * kk + (slice(start, stop),)]


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


def _evaluate_piece(rec, arrays) -> dict:
    """evaluate()'s keys for one piece: arrays from evaluate_arrays, the record-level keys
    (model, n_devices_total, tree_parents, …) from evaluate() on the piece's record."""
    if arrays is None or (not arrays and not isinstance(rec.hardware, HardwareStack) and not np.ndim(rec.n_devices)
                          and not isinstance(rec.weight_dtype, WeightDtypes) and not isinstance(rec.model, ModelStack)):
        return _flat(evaluate(rec))
    # the per-operator breakdown is not a column; numpy's buffer within a row (fast.arrays.row_buffers)
    with operator_rows(False), row_buffers(arrays):
        res = evaluate_arrays(rec, arrays, bound_codes=True, check_limits=False)   # check_block did
    extras = res.pop("_extras")
    res.pop("_step_ops", None)
    # evaluate()'s keys in its order: the record's, the arrays, the record-level tail
    out = record_head(rec)
    out.update(res)
    if isinstance(rec.model, ModelStack) or isinstance(rec.weight_dtype, WeightDtypes):
        # stacked models or dtypes: each member record's record-level keys (its notes)
        out.update(member_tails(rec, _execs(rec)[0], extras, _flat, _same))
    else:
        out.update(_flat(record_tail(rec, extras)))
    return out


def _same(x, y) -> bool:
    """x and y are the same record-level value (text, number, or an array of device counts)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.array_equal(x, y)
    return type(x) is type(y) and x == y


_RECORD_KEYS: dict = {}


def _record_keys(rec: Record) -> dict:
    """evaluate(rec) with its keys in order (the schema's column kinds)."""
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
    return {k: (canonical_value(tuple(v)) if isinstance(v, list) else v) for k, v in d.items()
            if not isinstance(v, dict)}


# ----------------------------------------------------------------------------------------- public

def sweep(base_record=None, *, engine: str = "numpy", scheduler=None, chunk_rows: int | None = None,
          workers: int | None = None, output=None, progress=None, on_invalid: str = "error", **axes):
    """Evaluate the Cartesian grid of ``axes`` over ``base_record`` -> ``pandas.DataFrame``.

    ``base_record``: a record mapping (fields: ``costmodel eval --help``) with the fields that do not vary.
    ``axes``: field -> values (list/range/array, or text ``"1,8,64"`` / ``"16:16000:16"``; see
    :func:`parse_axis`). Row i equals ``evaluate(base_record | row i's axis values)``: the same
    formulas and floating-point operations, run on arrays (module docstring).

    ``engine``: ``"numpy"`` (in process) or ``"dask"`` (chunks on a ``dask.distributed``
    cluster: ``scheduler`` None starts a ``LocalCluster``; an address such as
    ``"tcp://host:8786"`` or a ``distributed.Client`` uses that cluster).
    ``chunk_rows``: rows per evaluation call (default ``CHUNK_ROWS``: arrays that stay in cache) and per
    Dask task (default 2**20). ``workers``: processes (forked, their chunks gathered here) or,
    where forking is not safe, threads evaluating chunks (default: the CPU count, at most 8, but this
    process alone for a grid of several groups over arrays, whose gathering costs more than it
    saves; 1 = this process alone); see the module docstring.
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
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer))
                                   or chunk_rows < 1):
        raise InputError(f"chunk_rows must be a positive integer, got {_short_value(chunk_rows)}", source=_SOURCE,
                         field="chunk_rows")
    if engine in (None, "numpy", "local", "dask"):
        output = check_output(output, engine)
    if engine in (None, "numpy", "local"):
        df = _sweep_local(base, axes, int(chunk_rows or CHUNK_ROWS), progress,
                          None if workers is None else _workers(workers), on_invalid)
        if output is not None:
            write_frame(df, output)
        return df
    if engine == "dask":
        from costmodel.analysis.sweep_dask import sweep_dask
        return sweep_dask(base, axes, scheduler=scheduler, chunk_rows=int(chunk_rows or DEFAULT_CHUNK_ROWS),
                           output=output, progress=progress, workers=_workers(workers, 1), on_invalid=on_invalid)
    raise InputError(f"unknown engine {engine!r}", source=_SOURCE, field="engine", allowed=", ".join(ENGINES))


def _workers(n, default=None) -> int:
    if n is None:
        return default if default is not None else max(1, min(os.cpu_count() or 1, 8))
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"workers must be a positive integer, got {_short_value(n)}", source=_SOURCE,
                         field="workers")
    most = max_workers()
    if n > most:
        raise InputError(f"workers = {int(n)} is more than this machine's {os.cpu_count() or 1} CPUs", source=_SOURCE,
                         field="workers", allowed=f"1 to {most} (the CPU count, at least 2)")
    return int(n)


def max_workers() -> int:
    """Most sweep workers: the CPU count (each worker is a busy process), at least 2."""
    return max(2, os.cpu_count() or 1)


def _short_value(v) -> str:
    return repr(v) if isinstance(v, (int, float, np.integer, np.floating)) else f"a {type(v).__name__}"


def _base_dict(base_record) -> dict:
    if base_record is None:
        return {}
    if isinstance(base_record, Record):
        return {f: getattr(base_record, f) for f in FIELD_NAMES if getattr(base_record, f) is not None}
    if not isinstance(base_record, dict):
        raise InputError(f"base_record must be a mapping of field: value, got {type(base_record).__name__}",
                         source=_SOURCE)
    return dict(base_record)


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic garbage collector off while the sweep runs (as it was before, after). A sweep
    allocates many short-lived objects (records, blocks, per-chunk dicts) that reference counting
    frees; the allocations alone would trigger collections of every object the process holds (a
    full one costs milliseconds in a process that holds numpy, pandas and the specs)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _sweep_local(base: dict, axes: dict, chunk_rows: int, progress=None, workers: int | None = 1,
                 on_invalid: str = "error"):
    import pandas as pd

    with _gc_paused(), shared_passes():          # neighbouring blocks share equal passes (engine.pass_memo)
        names, axis_cols, cols, invalid = _evaluate_grid(base, axes, chunk_rows, progress, workers, on_invalid)
    data = {n: axis_cols[n] for n in names}
    for k, a in cols.cols.items():
        data[k] = frame_column(a)
    if on_invalid == "mark":
        data[REASON_COLUMN] = (np.full(cols.n, None, dtype=object) if invalid.reasons is None
                               else invalid.reasons.reshape(-1))
    for k, a in data.items():     # other objects (invalid_reason) stay object dtype: no pass over the rows
        if isinstance(a, np.ndarray) and a.dtype == object:
            data[k] = pd.Series(a, dtype=object, copy=False)
    df = pd.DataFrame(data, copy=False)
    if on_invalid == "drop" and invalid.mask is not None:
        df = df[~invalid.mask.reshape(-1)].reset_index(drop=True)
    return df
