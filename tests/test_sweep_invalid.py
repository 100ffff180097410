"""on_invalid: a grid with invalid combinations is refused (error), or evaluated with those rows
marked (their outputs NaN / None, the reason in invalid_reason) or dropped."""

import math

import numpy as np
import pytest

from costmodel import InputError, evaluate
from costmodel.analysis.sweep import sweep
from costmodel.cli.main import main

# llama-68m has 12 attention heads: 8 devices cannot split them (8 does not divide 12)
DEV = dict(base=dict(hardware="a100-80gb", prompt_len=128),
           axes=dict(model=["llama-68m", "llama-2-7b"], n_devices=[1, 8], batch_size=[1, 2]))


def test_error_is_the_default():
    with pytest.raises(InputError, match="tensor_parallel 8 does not divide the model's 12 attention heads"):
        sweep(DEV["base"], **DEV["axes"])
    with pytest.raises(InputError, match="on_invalid"):
        sweep(DEV["base"], on_invalid="skip", **DEV["axes"])


def test_mark_keeps_every_row_and_valid_rows_equal_evaluate():
    df = sweep(DEV["base"], on_invalid="mark", workers=1, **DEV["axes"])
    assert len(df) == 2 * 2 * 2 and df.columns[-1] == "invalid_reason"
    bad = (df["model"] == "llama-68m") & (df["n_devices"] == 8)
    assert bad.sum() == 2 and df["invalid_reason"].notna().tolist() == bad.tolist()
    assert all("tensor_parallel 8 does not divide" in r for r in df.loc[bad, "invalid_reason"])
    assert df.loc[bad, "step_latency_s"].isna().all() and df.loc[bad, "fits"].isna().all()
    for i in np.flatnonzero(~bad.to_numpy()):
        row = df.iloc[i]
        want = evaluate(dict(DEV["base"], model=row["model"], n_devices=int(row["n_devices"]),
                             batch_size=int(row["batch_size"])))
        for k in ("step_latency_s", "tokens_per_s", "ttft_s", "peak_device_memory_bytes", "bound", "fits"):
            assert row[k] == want[k], k


def test_drop_leaves_the_invalid_rows_out():
    df = sweep(DEV["base"], on_invalid="drop", workers=1, **DEV["axes"])
    assert len(df) == 6 and "invalid_reason" not in df.columns
    assert not ((df["model"] == "llama-68m") & (df["n_devices"] == 8)).any()
    assert df["fits"].tolist() == [True] * 6


def test_numeric_rows_and_values_out_of_range_are_marked():
    base = dict(model="llama-2-7b", hardware="a100-80gb", strategy="shared_prefix", n_branches=2,
                shared_prefix_len=100)
    # the first row (prompt 64 < prefix 100) is invalid: the group still evaluates from a valid row
    df = sweep(base, on_invalid="mark", workers=1, prompt_len=[64, 128], batch_size=[1, -1, 4])
    assert df["batch_size"].tolist() == [1, -1, 4, 1, -1, 4]       # shown as given
    reasons = df["invalid_reason"].tolist()
    assert reasons[0] == reasons[2] == "shared_prefix_len > prompt_len"
    assert "batch_size" in reasons[1] and "out of range" in reasons[1] and reasons[1] == reasons[4]
    assert reasons[3] is None and reasons[5] is None
    assert math.isnan(df["step_latency_s"][1]) and not math.isnan(df["step_latency_s"][5])
    want = evaluate(dict(base, prompt_len=128, batch_size=4))
    assert df["step_latency_s"][5] == want["step_latency_s"] and df["e2e_latency_s"][5] == want["e2e_latency_s"]


def test_mark_on_forked_workers_equals_one_process():
    base = dict(model="llama-2-7b", hardware="a100-80gb", strategy="shared_prefix", n_branches=2)
    axes = dict(prompt_len=range(16, 2001, 16), shared_prefix_len=[0, 100, 1000], batch_size=range(1, 65))
    one = sweep(base, on_invalid="mark", workers=1, chunk_rows=500, **axes)
    two = sweep(base, on_invalid="mark", workers=2, chunk_rows=500, **axes)
    assert one.columns.tolist() == two.columns.tolist()
    for c in one.columns:
        a, b = one[c].to_numpy(), two[c].to_numpy()
        if a.dtype == float:
            assert np.array_equal(a, b, equal_nan=True), c
        else:
            assert (a == b).all() or all((x == y) or (x != x and y != y) for x, y in zip(a, b)), c
    # prefix 100: prompts 16..96 (6 values) are shorter; prefix 1000: prompts 16..992 (62 values)
    assert one["invalid_reason"].notna().sum() == (6 + 62) * 64


def test_cli_prints_how_many_rows_it_marked(capsys, tmp_path):
    out = tmp_path / "g.csv"
    rc = main(["sweep", "hardware=a100-80gb", "prompt_len=128", "model=llama-68m,llama-2-7b", "n_devices=1,8",
               "batch_size=1,2", "--on-invalid", "mark", "--output", str(out), "--no-progress"])
    assert rc in (None, 0)
    assert "2 of 8 rows invalid" in capsys.readouterr().err
    text = out.read_text().splitlines()
    assert text[0].split(",")[-1] == "invalid_reason" and len(text) == 9


def test_cli_table_leaves_a_marked_rows_text_blank(capsys):
    # prompt 5000 is beyond llama-2-7b's 4096-token context: that row has no outputs, and its text
    # cells (hardware, strategy, bound) print empty, as its numbers print nan
    main(["sweep", "model=llama-2-7b", "hardware=a100-80gb", "batch_size=1", "prompt_len=128,5000",
          "--on-invalid", "mark", "--no-progress"])
    lines = capsys.readouterr().out.splitlines()
    header, marked = lines[0].split(), lines[-1]
    assert header[:4] == ["prompt_len", "hardware", "dev", "strategy"]
    assert marked.split()[0] == "5000" and "a100-80gb" not in marked and "memory" not in marked
    assert marked.split()[1] == "nan"                                                  # dev: a number
    assert "nan" not in marked[lines[0].index("hardware"):lines[0].index("dev")]     # the hardware cell
