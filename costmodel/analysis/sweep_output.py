"""Writing a sweep's rows: ``.csv`` (pyarrow's writer when installed, else pandas') or ``.parquet``,
checked before the work (:func:`check_output`) and written atomically (:mod:`costmodel.inputs.outputs`)."""

from __future__ import annotations

import os

from costmodel.errors import InputError

#: the source named by a sweep's messages
_SOURCE = "sweep"

OUTPUT_TYPES = (".csv", ".parquet", ".pq")


def check_output(output, engine: str = "numpy") -> str | None:
    """``output`` checked before any row is computed (known extension, existing writable folder);
    with the Dask engine a path not ending in .csv is a directory of Parquet parts."""
    if output is None:
        return None
    from costmodel.inputs.outputs import check_output_path
    dask_dir = engine == "dask" and not (isinstance(output, (str, os.PathLike))
                                         and os.fspath(output).lower().endswith(".csv"))
    p = check_output_path(output, None if dask_dir else OUTPUT_TYPES, field="output", directory_ok=dask_dir)
    if not p.lower().endswith(".csv"):
        need_parquet()
    return p


def write_frame(df, path) -> str:
    """Write ``df`` to ``path`` (``.parquet`` with pyarrow, or ``.csv``) atomically: a temporary file
    in the same folder replaces ``path`` only when complete. Returns the path."""
    from costmodel.inputs.outputs import atomic_open, atomic_path
    p = check_output(path)
    if p.lower().endswith((".parquet", ".pq")):
        with atomic_path(p) as tmp:
            df.to_parquet(tmp, index=False)
    else:
        with atomic_open(p, "wb") as fh:
            write_csv(df, fh, header=True)
    return p


def write_csv(df, fh, header: bool) -> None:
    """CSV rows of ``df`` to the binary file ``fh``, text cells made safe for spreadsheets
    (:func:`costmodel.inputs.outputs.spreadsheet_safe`). pyarrow's writer when installed (about 8x
    faster than pandas on wide frames; booleans as true/false), else pandas'. Values round-trip
    exactly either way."""
    from costmodel.inputs.outputs import spreadsheet_safe
    df = spreadsheet_safe(df)
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        import io
        text = io.StringIO()
        df.to_csv(text, index=False, header=header)
        fh.write(text.getvalue().encode())
        return
    table = pa.Table.from_pandas(df, preserve_index=False)
    try:
        opts = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    except TypeError:                       # older pyarrow: strings quoted
        opts = pacsv.WriteOptions(include_header=False)
    if header:
        import csv
        import io
        line = io.StringIO()
        csv.writer(line, lineterminator="\n").writerow([str(c) for c in df.columns])
        fh.write(line.getvalue().encode())
    pacsv.write_csv(table, fh, opts)


def need_parquet():
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError("writing Parquet needs pyarrow, which is not installed; install it with "
                         "pip install 'costmodel[sweep]' (or pip install pyarrow), or write .csv",
                         source=_SOURCE, field="output") from None
