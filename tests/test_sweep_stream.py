"""The CLI's streamed output: Parquet per chunk (text dictionary-encoded) and CSV appended per chunk
hold the rows sweep() returns, in order."""

import numpy as np
import pandas as pd
import pytest

from costmodel.analysis.sweep import sweep
from costmodel.analysis.sweep_stream import stream_sweep
from costmodel.cli.main import main

BASE = dict(model="llama-2-7b", draft_model="llama-68m", acceptance_rate=0.7, prompt_len=256)
AXES = dict(hardware=["a100-80gb", "t4"], strategy=["autoregressive", "speculative"], batch_size=list(range(1, 40)))


def _equal(got, want):
    assert got.columns.tolist() == want.columns.tolist()
    for c in want.columns:
        g, w = got[c], want[c]
        if isinstance(g.dtype, pd.CategoricalDtype) or str(g.dtype) == "boolean":
            g = g.astype(object).where(g.notna(), None)
        if isinstance(w.dtype, pd.CategoricalDtype):     # the frame's text: missing is NaN there
            w = w.astype(object).where(w.notna(), None)
        if w.dtype == float:
            assert np.array_equal(g.to_numpy(dtype=float), w.to_numpy(), equal_nan=True), c
        else:
            assert [None if x is pd.NA else x for x in g.tolist()] == w.tolist(), c


def test_parquet_chunks_equal_the_frame(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    want = sweep(BASE, workers=1, **AXES)
    out = tmp_path / "g.parquet"
    res = stream_sweep(BASE, AXES, out, chunk_rows=25, workers=1)
    assert res == {"rows": len(want), "columns": len(want.columns), "invalid": 0}
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups > 4                       # one per chunk
    got = pd.read_parquet(out)
    assert isinstance(got["hardware"].dtype, pd.CategoricalDtype)
    assert isinstance(got["bound"].dtype, pd.CategoricalDtype)
    _equal(got, want)


def test_csv_chunks_equal_the_frame(tmp_path):
    want = sweep(BASE, workers=1, **AXES)
    out = tmp_path / "g.csv"
    stream_sweep(BASE, AXES, out, chunk_rows=30, workers=1)
    got = pd.read_csv(out)
    assert len(got) == len(want) and got.columns.tolist() == want.columns.tolist()
    assert np.array_equal(got["tokens_per_s"].to_numpy(), want["tokens_per_s"].to_numpy())
    assert got["bound"].tolist() == want["bound"].tolist()


def test_parquet_marked_rows_as_nulls(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    axes = dict(model=["llama-68m", "llama-2-7b"], n_devices=[1, 8], batch_size=list(range(1, 9)))
    base = dict(hardware="a100-80gb", prompt_len=128)
    want = sweep(base, on_invalid="mark", workers=1, **axes)
    out = tmp_path / "g.parquet"
    res = stream_sweep(base, axes, out, chunk_rows=8, workers=1, on_invalid="mark")
    assert res["invalid"] == 8 and res["rows"] == 32
    got = pd.read_parquet(out)
    assert pq.read_schema(out).field("fits").type == "bool" and got["fits"].isna().sum() == 8
    _equal(got, want)


def test_cli_streams_parquet(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "g.parquet"
    main(["sweep", "model=llama-2-7b", "hardware=a100-80gb", "batch_size=1:64", "prompt_len=128,256",
          "--output", str(out), "--chunk-rows", "40", "--workers", "1", "--no-progress"])
    assert "wrote 128 rows" in capsys.readouterr().out
    got = pd.read_parquet(out)
    want = sweep(dict(model="llama-2-7b", hardware="a100-80gb"), workers=1, batch_size=range(1, 65),
                 prompt_len=[128, 256])
    _equal(got, want)
