"""A sweep's text columns: kept as small-integer codes while the grid is evaluated
(costmodel.analysis.sweep_columns.TextColumn) and returned as pandas categories whose categories are
the texts the column holds, sorted; a missing text (an invalid row's) is a missing value."""

import numpy as np
import pandas as pd

from costmodel import evaluate
from costmodel.analysis.sweep import sweep
from costmodel.analysis.sweep_columns import Columns, TextColumn, text_categories

SPEC = dict(model="llama-2-7b", hardware="a100-80gb", strategy="speculative", draft_model="llama-68m",
            acceptance_rate=0.7)


def test_text_column_codes_and_categories():
    col = TextColumn((2, 3))
    assert col.put((0, slice(None)), "memory")                   # a row's text: one code
    assert col.put((1, slice(0, 2)), np.array(["compute", None], dtype=object))
    assert col.codes.tolist() == [[0, 0, 0], [1, -1, -1]]        # first written first; -1: none
    cat = col.categorical()
    assert list(cat.categories) == ["compute", "memory"]          # sorted
    assert cat.codes.tolist() == [1, 1, 1, 0, -1, -1] and cat.isna().sum() == 2
    assert col.objects().tolist() == [["memory"] * 3, ["compute", None, None]]


def test_text_column_drops_texts_no_row_holds_and_widens_past_127():
    col = TextColumn((300,))
    for i in range(300):                                         # 300 texts: int16 codes
        assert col.put(i, f"t{i:03d}")
    assert col.codes.dtype == np.int16
    col.codes[:150] = -1                                         # blanked rows (invalid ones)
    cat = col.categorical()
    assert list(cat.categories) == [f"t{i:03d}" for i in range(150, 300)]
    assert cat.isna().sum() == 150 and list(cat[150:152]) == ["t150", "t151"]


def test_bound_codes_become_the_bounds_held():
    # codes index the five bound names; only those held are categories, sorted
    from costmodel.engine.roofline import BOUNDS
    codes = np.array([[1, 1], [-1, 1]], dtype=np.int8)                  # memory only: re-coded 0 / -1
    cat = TextColumn.of_codes(codes, BOUNDS).categorical()
    assert list(cat.categories) == ["memory"] and cat.codes.tolist() == [0, 0, -1, 0]
    codes = np.array([[0, 1], [1, -1]], dtype=np.int8)                  # compute, memory: codes kept
    cat = TextColumn.of_codes(codes, BOUNDS).categorical()
    assert list(cat.categories) == ["compute", "memory"] and cat.codes.tolist() == [0, 1, 1, -1]
    codes = np.array([[4, 1], [0, 4]], dtype=np.int8)                   # launch, memory, compute
    cat = TextColumn.of_codes(codes, BOUNDS).categorical()
    assert list(cat.categories) == ["compute", "launch", "memory"] and cat.codes.tolist() == [1, 2, 0, 1]


def test_text_column_refuses_what_is_not_text():
    col = TextColumn((2,))
    assert not col.put(0, 1.5) and not col.put(slice(None), np.array(["a", 2], dtype=object))
    assert (col.codes == -1).all() and col.texts() == []          # nothing written


def test_columns_keep_a_text_column_that_gets_a_number_as_objects():
    # a column of texts in one block and numbers in another: objects, as before categories existed
    cols = Columns((2, 2), multi=True)
    cols.put("x", (0, slice(None)), 2, "a")
    cols.put("x", (1, slice(None)), 2, np.array([1.0, 2.0]))
    assert cols.cols["x"].dtype == object and cols.cols["x"].tolist() == [["a", "a"], [1.0, 2.0]]


def test_sweep_text_columns_are_categories_of_the_texts_held():
    df = sweep(SPEC, workers=1, hardware=["t4", "a100-80gb"], strategy=["speculative", "autoregressive"],
               batch_size=[1, 64], prompt_len=[128, 3000])
    for c in ("hardware", "strategy", "model", "bound", "prefill_bound", "notes"):
        assert isinstance(df[c].dtype, pd.CategoricalDtype), c
        assert list(df[c].cat.categories) == sorted(set(df[c].dropna())), c
    assert list(df["hardware"].cat.categories) == ["a100-80gb", "t4"] and df["hardware"].iloc[0] == "t4"
    row = df.iloc[5]                                              # t4, autoregressive, batch 1, prompt 3000
    want = evaluate(dict(SPEC, hardware=row["hardware"], strategy=row["strategy"],
                         batch_size=int(row["batch_size"]), prompt_len=int(row["prompt_len"])))
    assert row["bound"] == want["bound"] and row["prefill_bound"] == want["prefill_bound"]


def test_marked_rows_have_missing_text():
    df = sweep(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1), workers=1, on_invalid="mark",
               prompt_len=[128, 5000])
    assert df["invalid_reason"].dtype == object                   # the reasons stay object text
    assert df["bound"].isna().tolist() == [False, True] and df["model"].isna().tolist() == [False, True]
    assert list(df["bound"].cat.categories) == [df["bound"].iloc[0]]


def test_gathered_text_gets_the_same_categories():
    s = pd.Series(["memory", None, "compute", "memory"], dtype=object)
    got = text_categories(s)
    assert list(got.cat.categories) == ["compute", "memory"] and got.isna().tolist() == [False, True, False, False]
    mixed = pd.Series([True, None, False], dtype=object)         # a bool column some rows lack: kept
    assert text_categories(mixed) is mixed


def test_categorical_dtypes_are_made_once():
    # a pandas CategoricalDtype costs ~30 µs to build: two sweeps over the same texts share one
    one = sweep(SPEC, workers=1, batch_size=[1, 2], prompt_len=[128])
    two = sweep(SPEC, workers=1, batch_size=[4], prompt_len=[256])
    assert one["model"].dtype is two["model"].dtype and one["strategy"].dtype is two["strategy"].dtype
