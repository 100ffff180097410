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
(CSV / Parquet); this one evaluates the blocks (in process, forked, or on Dask) and assembles the frame.
"""

from __future__ import annotations

import contextlib
import itertools
import os

import numpy as np

from costmodel.analysis.sweep_columns import CODE_KEYS, Columns, array_kind, value_kind
from costmodel.analysis.sweep_grid import MAX_AXIS_VALUES, MAX_GRID_ROWS, Axis, Block, arrays_for, canonical_value, \
    check_block, check_grid, grid_size, group_blocks, parse_axis, plan_axes
from costmodel.analysis.sweep_output import check_output, need_parquet, write_csv, write_frame
from costmodel.fast.sweep_fork import can_fork, evaluate_forked
from costmodel.errors import InputError
from costmodel.engine.evaluate import evaluate, evaluate_arrays
from costmodel.engine.roofline import operator_rows
from costmodel.inputs.fields import BY_NAME, FIELD_NAMES
from costmodel.inputs.record import Record, parse_record
from costmodel.inputs.outputs import atomic_open, staged_dir

__all__ = ["sweep", "parse_axis", "grid_size", "DEFAULT_CHUNK_ROWS"]

#: rows per evaluate_arrays call in process: 32768-element arrays (256 KiB) stay in cache, which
#: makes each array operation 2-3x faster than on million-element arrays
CHUNK_ROWS = 1 << 15
#: rows per Dask task (each task evaluates its rows in CHUNK_ROWS pieces): 2**20 rows of ~45
#: columns is ~0.4 GB of results per task
DEFAULT_CHUNK_ROWS = 1 << 20
ENGINES = ("numpy", "dask")
_SOURCE = "sweep"


# ----------------------------------------------------------------------------------------- engine

def _plan(base: dict, axes_in: dict, in_memory: bool = True):
    """Parse the axes and the groups' records and run every check, before any evaluation."""
    axes_l = plan_axes(base, axes_in, in_memory)
    axes = {a.name: a for a in axes_l}
    blocks = group_blocks(base, axes_l)
    names = [a.name for a in axes_l]
    for b in blocks:
        if b.rowwise:
            for _where, row in _rows(b, axes, names):
                parse_record(row, source=b.label)
        else:
            check_block(b, arrays_for(b, axes))
    return axes_l, axes, names, blocks


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


def _pieces(b: Block, axes: dict, names: list, chunk_rows: int):
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
            yield tuple(where), (stop - start) * trailing, arrays_for(b, axes, sl), b.rec


def _evaluate_grid(base: dict, axes_in: dict, chunk_rows: int, progress=None, workers: int = 1):
    axes_l, axes, names, blocks = _plan(base, axes_in)
    shape = tuple(len(a.raw) for a in axes_l)
    total = int(np.prod(shape, dtype=np.int64))
    cols = Columns(shape, len(blocks) > 1)
    done = 0
    tasks = ((b, piece) for b in blocks for piece in _pieces(b, axes, names, chunk_rows))
    if workers > 1 and len(blocks) == 1 and not blocks[0].rowwise and can_fork():
        # one group: its chunks on forked processes writing into shared columns (_sweep_fork)
        tasks = list(tasks)
        if len(tasks) >= 2 * workers:
            got = evaluate_forked(tasks, _run_piece, lambda t: (t[1][0], t[1][1]), shape, axes, workers,
                                  progress, total, CODE_KEYS)
            if got is not None:
                cols.cols, tasks = got, []
                cols.written = dict.fromkeys(got, cols.n)
                cols.coded = {k for k in CODE_KEYS if k in got}
    for (b, (where, rows, _arrays, _rec)), res in _map(_run_piece, tasks, workers):
        for key, v in res.items():
            if key not in axes:
                cols.put(key, where, rows, v)
        done += rows
        if progress is not None:
            progress(done, total)
    cols.finish()
    axis_cols = {}
    for k, a in enumerate(axes_l):
        vals = _axis_array(a)
        s = [1] * len(shape)
        s[k] = len(vals)
        axis_cols[a.name] = np.broadcast_to(vals.reshape(s), shape)
    return names, axis_cols, cols


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


def _axis_array(a: Axis) -> np.ndarray:
    vals = a.values
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
    return {k: (canonical_value(tuple(v)) if isinstance(v, list) else v) for k, v in d.items()
            if not isinstance(v, dict)}


# ----------------------------------------------------------------------------------------- public

def sweep(base_record=None, *, engine: str = "numpy", scheduler=None, chunk_rows: int | None = None,
          workers: int | None = None, output=None, progress=None, **axes):
    """Evaluate the Cartesian grid of ``axes`` over ``base_record`` -> ``pandas.DataFrame``.

    ``base_record``: a record mapping (fields: ``costmodel eval --help``) with the fields that do not vary.
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
    """
    base = _base_dict(base_record)
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer))
                                   or chunk_rows < 1):
        raise InputError(f"chunk_rows must be a positive integer, got {_short_value(chunk_rows)}", source=_SOURCE,
                         field="chunk_rows")
    if engine in (None, "numpy", "local", "dask"):
        output = check_output(output, engine)
    if engine in (None, "numpy", "local"):
        df = _sweep_local(base, axes, int(chunk_rows or CHUNK_ROWS), progress, _workers(workers))
        if output is not None:
            write_frame(df, output)
        return df
    if engine == "dask":
        return _sweep_dask(base, axes, scheduler=scheduler, chunk_rows=int(chunk_rows or DEFAULT_CHUNK_ROWS),
                           output=output, progress=progress, workers=_workers(workers, 1))
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


def _sweep_local(base: dict, axes: dict, chunk_rows: int, progress=None, workers: int = 1):
    import pandas as pd

    names, axis_cols, cols = _evaluate_grid(base, axes, chunk_rows, progress, workers)
    data = {n: np.ascontiguousarray(axis_cols[n]).reshape(-1) for n in names}
    for k, a in cols.cols.items():
        data[k] = a.reshape(-1)
    for k, a in data.items():     # text stays object dtype: no conversion pass over the rows
        if a.dtype == object:
            data[k] = pd.Series(a, dtype=object, copy=False)
    return pd.DataFrame(data, copy=False)


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


def _schema(base: dict, axes: dict, in_memory: bool = True) -> tuple[list, dict]:
    """Columns and dtypes every chunk is conformed to (so Parquet parts share one schema)."""
    axes_l, axes_d, names, blocks = _plan(base, axes, in_memory)
    cols: list = list(names)
    kinds: dict = {n: array_kind(_axis_array(a)) for n, a in zip(names, axes_l)}
    seen: dict = {}
    for b in blocks:
        if b.rowwise:
            row = next(_rows(b, axes_d, names))[1]
            keys = _flat(evaluate(row))
        else:
            keys = _record_keys(b.rec)
        for k, v in keys.items():
            if k in axes_d:
                continue
            if k not in kinds:
                cols.append(k)
                kinds[k] = value_kind(v)
            elif kinds[k] != value_kind(v):
                kinds[k] = "f" if {kinds[k], value_kind(v)} <= {"i", "f"} else "o"
            seen[k] = seen.get(k, 0) + 1
    for k, c in seen.items():
        if c < len(blocks) and kinds[k] in "bi":
            kinds[k] = "f" if kinds[k] == "i" else "o"
    dtypes = {k: {"f": "float64", "i": "int64", "b": "bool", "o": "object"}[kinds[k]] for k in cols}
    return cols, dtypes


def _dask_task(base: dict, sub_axes: dict, workers: int, columns: list, dtypes: dict, part_path):
    """One chunk on a worker: the in-process sweep, conformed to the schema; written to
    ``part_path`` (returns the row count) or returned."""
    df = _sweep_local(base, sub_axes, CHUNK_ROWS, None, workers)
    df = df.reindex(columns=columns).astype(dtypes, copy=False)
    if part_path is None:
        return df
    df.to_parquet(part_path, index=False)
    return len(df)


def _prepare_parts_dir(out: str, n: int) -> list:
    """An fsspec URL (such as s3://bucket/grid.parquet): create the directory, remove parts of an
    earlier run, and return the n part paths. (A local path is written to a staging directory
    instead: :func:`costmodel.inputs.outputs.staged_dir`.)"""
    from fsspec.core import url_to_fs
    fs, root = url_to_fs(out)
    fs.makedirs(root, exist_ok=True)
    for f in fs.ls(root, detail=False):
        name = f.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith("part.") and name.endswith(".parquet"):
            fs.rm(f)
    return [f"{out.rstrip('/')}/part.{i:05d}.parquet" for i in range(n)]


def _local_parts(folder: str, n: int) -> list:
    return [os.path.join(os.path.abspath(folder), f"part.{i:05d}.parquet") for i in range(n)]


def _sweep_dask(base: dict, axes: dict, scheduler, chunk_rows: int, output, progress, workers: int = 1):
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("engine='dask' needs dask.distributed, which is not installed; install it with "
                         "pip install 'costmodel[dask]' (or pip install 'dask[distributed]' pyarrow)",
                         source=_SOURCE, field="engine") from None
    columns, dtypes = _schema(base, axes, in_memory=output is None)       # validates the whole grid here, before any task
    chunks = _chunks(axes, chunk_rows)
    sizes = [int(np.prod([len(parse_axis(n, v)) for n, v in c.items()], dtype=np.int64)) for c in chunks]
    total = sum(sizes)
    out = None if output is None else os.fspath(output)
    to_csv = out is not None and out.lower().endswith(".csv")
    with contextlib.ExitStack() as stack:
        parts = None
        if out is not None and not to_csv:
            if "://" in out:
                parts = _prepare_parts_dir(out, len(chunks))
            else:           # parts go to a staging directory that replaces ``out`` when complete
                parts = _local_parts(stack.enter_context(staged_dir(out)), len(chunks))
        fh = stack.enter_context(atomic_open(out, "wb")) if to_csv else None
        return _run_dask(base, chunks, sizes, total, scheduler, workers, columns, dtypes, parts, fh,
                         out, progress, Client, LocalCluster, as_completed)


def _run_dask(base, chunks, sizes, total, scheduler, workers, columns, dtypes, parts, fh, out, progress,
              Client, LocalCluster, as_completed):
    import pandas as pd

    to_csv = fh is not None
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
                                 None if parts is None else parts[i], pure=False)
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
                write_csv(f.result(), fh, header=i == 0)
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
