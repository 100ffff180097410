"""A sweep written to a file chunk by chunk: memory bounded by one chunk, whatever the grid's size.

The grid is cut into sub-grids of about ``chunk_rows`` rows that are contiguous in row order
(:func:`costmodel.analysis.sweep_dask.grid_chunks`, as for Dask tasks); each is evaluated in process
(forked workers included), conformed to one schema for the whole grid and appended to the file:

* Parquet through one ``pyarrow.parquet.ParquetWriter`` (one row group per chunk); text columns
  are dictionary-encoded (``dictionary<int32, string>``: read back as pandas categories), a bool
  column that some rows lack is a nullable bool;
* CSV appended chunk by chunk (:func:`costmodel.analysis.sweep_output.write_csv`).

The rows go to a temporary file next to the path, which replaces the path only when complete.

The file holds the rows :func:`costmodel.analysis.sweep.sweep` returns, in the same order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.analysis.sweep_invalid import REASON_COLUMN, check_on_invalid

#: rows per chunk: 2**18 rows of ~45 columns are ~0.1 GB of results (and as much again for the
#: Arrow copy Parquet is written from), large enough that the per-chunk Python is < 5 % of it
STREAM_ROWS = 1 << 18


def stream_sweep(base: dict, axes: dict, path, *, chunk_rows: int | None = None, workers: int | None = None,
                 progress=None, on_invalid: str = "error") -> dict:
    """Evaluate the grid into ``path`` (``.parquet`` or ``.csv``) one chunk at a time. Returns
    ``{"rows": rows written, "columns": column count, "invalid": invalid rows (marked or dropped)}``."""
    from costmodel.analysis import sweep as sw
    from costmodel.analysis.sweep_dask import grid_chunks, schema
    from costmodel.analysis.sweep_output import check_output, write_csv
    from costmodel.inputs.outputs import atomic_path

    on_invalid = check_on_invalid(on_invalid)
    p = check_output(path)                 # a known extension in an existing, writable folder
    parquet = p.lower().endswith((".parquet", ".pq"))
    columns, dtypes = schema(base, axes, on_invalid, nullable_bool=parquet, in_memory=False)   # validates the grid
    chunks = grid_chunks(axes, int(chunk_rows or STREAM_ROWS))
    sizes = [int(np.prod([len(sw.parse_axis(n, v)) for n, v in c.items()], dtype=np.int64)) for c in chunks]
    total, done, written, invalid = sum(sizes), 0, 0, 0
    n_workers = None if workers is None else sw._workers(workers)
    writer = None
    # a temporary file next to ``path`` that replaces it only when every chunk is written
    with atomic_path(p) as tmp, open(tmp, "wb") as fh:
        try:
            for i, (sub, size) in enumerate(zip(chunks, sizes)):
                df = sw._sweep_local(base, sub, sw.CHUNK_ROWS, None, n_workers, on_invalid)
                invalid += size - len(df) if on_invalid == "drop" else (
                    int(df[REASON_COLUMN].notna().sum()) if on_invalid == "mark" else 0)
                df = df.reindex(columns=columns)
                # text stays categorical (written as its codes and categories); the rest conformed
                df = df.astype({c: t for c, t in dtypes.items()
                                if not (t == "object" and isinstance(df[c].dtype, pd.CategoricalDtype))})
                if parquet:
                    import pyarrow as pa
                    import pyarrow.parquet as pq
                    table = _arrow_table(df, columns, dtypes)
                    if writer is None:      # Parquet's dictionary pages only for text: a float column
                        # of distinct values would be dictionary-encoded, then re-encoded plain (4x slower)
                        text = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
                        writer = pq.ParquetWriter(fh, table.schema, use_dictionary=text)
                    writer.write_table(table)
                    del table
                else:
                    write_csv(df, fh, header=i == 0)
                written += len(df)
                del df
                done += size
                if progress is not None:
                    progress(done, total)
        finally:
            if writer is not None:
                writer.close()
    return {"rows": written, "columns": len(columns), "invalid": invalid}


def _arrow_table(df, columns: list, dtypes: dict):
    """``df`` as an Arrow table of a fixed schema (the same for every chunk): text dictionary-encoded
    (a categorical column from its codes and categories)."""
    import pyarrow as pa

    arrays, fields = [], []
    for c in columns:
        s = df[c]
        if dtypes[c] == "object" and isinstance(s.dtype, pd.CategoricalDtype) and \
                all(isinstance(v, str) for v in s.cat.categories):
            codes = s.cat.codes.to_numpy()
            arr = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32), mask=codes < 0),
                                                 pa.array(list(s.cat.categories), type=pa.string()))
        elif dtypes[c] == "object":
            arr = _text(s).dictionary_encode()
        elif dtypes[c] == "boolean":
            arr = pa.array(s, type=pa.bool_(), from_pandas=True)
        else:
            arr = pa.array(s.to_numpy(), type=pa.from_numpy_dtype(np.dtype(dtypes[c])))
        arrays.append(arr)
        fields.append(pa.field(c, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _text(series):
    """A text column as Arrow strings (None stays null; any other value as its text)."""
    import pyarrow as pa
    try:
        return pa.array(series, type=pa.string(), from_pandas=True)
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([None if v is None or (isinstance(v, float) and v != v) else str(v) for v in series],
                        type=pa.string())
