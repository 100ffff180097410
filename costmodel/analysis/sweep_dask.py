"""The sweep in chunks: sub-grids of about ``chunk_rows`` rows in row order, the schema every chunk
is conformed to, and ``engine="dask"`` (each chunk a task on a ``dask.distributed`` cluster, written
by the worker as a Parquet part or streamed to CSV in row order). Used by
:func:`costmodel.analysis.sweep.sweep` and :mod:`costmodel.analysis.sweep_stream`."""

from __future__ import annotations

import contextlib
import itertools
import os

import numpy as np

from costmodel.analysis.sweep import CHUNK_ROWS, _flat, _plan, _record_keys, _rows, _sweep_local
from costmodel.analysis.sweep_columns import array_kind, axis_array, text_categories, value_kind
from costmodel.analysis.sweep_output import _SOURCE
from costmodel.analysis.sweep_grid import parse_axis
from costmodel.analysis.sweep_invalid import REASON_COLUMN
from costmodel.analysis.sweep_output import write_csv
from costmodel.inputs.outputs import atomic_open, staged_dir
from costmodel.engine.evaluate import evaluate
from costmodel.errors import InputError


def grid_chunks(axes: dict, chunk_rows: int) -> list[dict]:
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


def schema(base: dict, axes: dict, on_invalid: str = "error", nullable_bool: bool = False,
           in_memory: bool = True) -> tuple[list, dict]:
    """Columns and dtypes every chunk is conformed to (so Parquet parts share one schema). A bool
    column that some rows lack is ``object`` (True / False / None), or with ``nullable_bool``
    pandas' ``boolean``."""
    axes_l, axes_d, names, blocks, invalid = _plan(base, axes, on_invalid, in_memory)
    blocks = [b for b in blocks if b.invalid is None]
    cols: list = list(names)
    kinds: dict = {n: array_kind(axis_array(a)) for n, a in zip(names, axes_l)}
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
                kinds[k] = value_kind(v)
            elif kinds[k] != value_kind(v):
                kinds[k] = "f" if {kinds[k], value_kind(v)} <= {"i", "f"} else "o"
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


def sweep_dask(base: dict, axes: dict, scheduler, chunk_rows: int, output, progress, workers: int = 1,
               on_invalid: str = "error"):
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise InputError("engine='dask' needs dask.distributed, which is not installed; install it with "
                         "pip install 'costmodel[dask]' (or pip install 'dask[distributed]' pyarrow)",
                         source=_SOURCE, field="engine") from None
    columns, dtypes = schema(base, axes, on_invalid, in_memory=output is None)       # validates the whole grid here, before any task
    chunks = grid_chunks(axes, chunk_rows)
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
                         out, progress, Client, LocalCluster, as_completed, on_invalid)


def _run_dask(base, chunks, sizes, total, scheduler, workers, columns, dtypes, parts, fh, out, progress,
              Client, LocalCluster, as_completed, on_invalid: str = "error"):
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
                write_csv(f.result(), fh, header=i == 0)
                f.release()
                done += sizes[i]
                if progress is not None:
                    progress(done, total)
            return out
        frames = client.gather(futures)
        df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        for c in df.columns:              # text as the in-process sweep gives it: categories
            if dtypes.get(c) == "object" and c != REASON_COLUMN:
                df[c] = text_categories(df[c])
        return df
    finally:
        if client is not scheduler:
            client.close()
        if cluster is not None:
            cluster.close()
