"""Passes shared between a sweep's blocks (engine.pass_memo): the autoregressive and speculative
blocks of one model price the target's prefill and autoregressive decoding pass once, speculative
blocks over the same devices share the draft's passes, and every row is still evaluate() bit for
bit, invalid rows included; the sweep's float columns come from one slab."""

import contextlib

import numpy as np
import pandas as pd
import pytest

from costmodel import evaluate
from costmodel.analysis import sweep as sweep_module
from costmodel.analysis.sweep import sweep
from costmodel.analysis.sweep_columns import Columns
from costmodel.engine import pass_memo
from costmodel.errors import InputError
from tests.test_sweep_stacked import SPEC, _identical

GPUS = ["a100-80gb", "h100-pcie", "t4", "b200"]
# llama-3-8b's vocabulary (128256) is not llama-68m's (32000): its speculative rows are refused for
# every device; llama-68m's 12 heads do not split over 8 devices; prompt 4096 + gen 128 is beyond
# llama-2-7b's max_context 4096 (numeric rows marked)
CAPACITY = dict(hardware=GPUS, model=["llama-2-7b", "llama-3-8b", "llama-68m"],
                strategy=["autoregressive", "speculative"], weight_dtype=["fp16", "int8", "int4"],
                n_devices=[1, 2, 8], batch_size=[1, 16, 256], prompt_len=[128, 4096])


@contextlib.contextmanager
def _nothing_shared():
    yield


@pytest.fixture(scope="module")
def capacity():
    return sweep(SPEC, workers=1, on_invalid="mark", **CAPACITY)


def test_sharing_changes_no_value_and_does_share(monkeypatch, capacity):
    hits = []
    real = pass_memo.shared_call

    def counted(name, key, compute, keep=None):
        memo = pass_memo._MEMO.get()
        hits.append(memo is not None and (name, key) in memo)
        return real(name, key, compute, keep)

    monkeypatch.setattr(pass_memo, "shared_call", counted)
    again = sweep(SPEC, workers=1, on_invalid="mark", **CAPACITY)
    # per model with both strategies valid (llama-2-7b, llama-68m): the speculative block finds the
    # prefill and the autoregressive pass; llama-68m's draft passes and link are new (its 2 device
    # counts differ from llama-2-7b's 3), so at least 2 models × 2 hits
    assert sum(hits) >= 4
    monkeypatch.setattr(sweep_module, "shared_passes", _nothing_shared)
    alone = sweep(SPEC, workers=1, on_invalid="mark", **CAPACITY)
    assert again.equals(capacity) and alone.equals(capacity)
    assert capacity["invalid_reason"].notna().any() and capacity["invalid_reason"].isna().any()


def test_sampled_rows_equal_evaluate_and_invalid_rows_are_refused(capacity):
    """A sample of rows (every fourth, invalid ones included) against evaluate(), bit for bit."""
    names = list(CAPACITY)
    rng = np.random.default_rng(7)
    rows = sorted(set(rng.choice(len(capacity), size=120, replace=False).tolist())
                  | set(np.flatnonzero(capacity["invalid_reason"].notna().to_numpy())[::40].tolist()))
    checked = {"valid": 0, "invalid": 0}
    for i in rows:
        row = capacity.iloc[i]
        rec = dict(SPEC, **{k: (row[k].item() if hasattr(row[k], "item") else row[k]) for k in names})
        if isinstance(row["invalid_reason"], str):
            with pytest.raises(InputError):
                evaluate(rec)
            assert np.isnan(row["step_latency_s"]) and pd.isna(row["bound"])
            checked["invalid"] += 1
            continue
        want = evaluate(rec)
        for k, w in want.items():
            if k in names or k == "notes":
                continue
            got = row[k]
            got = got.item() if hasattr(got, "item") else got
            assert _identical(got, w), (i, k, got, w, rec)
        checked["valid"] += 1
    assert checked["valid"] >= 40 and checked["invalid"] >= 10


def test_the_refusals_name_each_row_as_before(capacity):
    """llama-3-8b speculative is refused for each device and device count with its own label; the
    other rows of that model are valid."""
    spec = capacity[(capacity["model"] == "llama-3-8b") & (capacity["strategy"] == "speculative")]
    assert spec["invalid_reason"].str.contains("differs from the target's").all()
    one = spec[(spec["hardware"] == "t4") & (spec["n_devices"] == 2) & (spec["weight_dtype"] == "int8")]
    assert set(one["invalid_reason"]) == {
        "sweep (hardware=t4, model=llama-3-8b, strategy=speculative, weight_dtype=int8, n_devices=2): field "
        "'draft_model': the draft's vocabulary (32000 tokens) differs from the target's (128256): its tokens "
        "cannot be verified (got 'llama-68m'); allowed: a draft with the target's tokenizer"}
    ar = capacity[(capacity["model"] == "llama-3-8b") & (capacity["strategy"] == "autoregressive")]
    assert ar["invalid_reason"].isna().all()


def test_outside_a_sweep_nothing_is_kept():
    rec = dict(SPEC, model="llama-2-7b", hardware="a100-80gb", strategy="speculative", batch_size=4, prompt_len=64)
    assert pass_memo._MEMO.get() is None
    a, b = evaluate(rec), evaluate(rec)
    assert a == b and pass_memo._MEMO.get() is None


def test_keys_compare_values_types_and_bytes():
    k = pass_memo.value_key
    assert k(np.array([1.0, 2.0])) == k(np.array([1.0, 2.0]))
    assert k(np.array([0.0])) != k(np.array([-0.0]))                 # bit for bit
    assert k(np.array([1.0])) != k(np.array([1]))                    # dtype
    assert k(np.array([1.0, 2.0])) != k(np.array([[1.0, 2.0]]))      # shape
    assert k(1) != k(1.0) and k("fp16") == k("fp16")
    box = [1]                                                        # unhashable: by identity
    assert k(box) == k(box) and k(box) != k([1])


def test_at_most_shared_passes_are_kept():
    with pass_memo.shared_passes():
        for i in range(pass_memo.SHARED_PASSES + 5):
            pass_memo.shared_call("n", i, lambda i=i: i)
        memo = pass_memo._MEMO.get()
        assert len(memo) == pass_memo.SHARED_PASSES and ("n", 0) not in memo
        assert pass_memo.shared_call("n", pass_memo.SHARED_PASSES + 4, lambda: "not called") == \
            pass_memo.SHARED_PASSES + 4
    assert pass_memo._MEMO.get() is None


def test_small_grids_take_float_columns_from_one_slab():
    cols = Columns((3, 4), multi=True)
    cols.put("a", (slice(None), slice(None)), 12, np.ones((3, 4)))
    cols.put("b", (slice(0, 1), slice(None)), 4, np.full((1, 4), 2.0))
    a, b = cols.cols["a"], cols.cols["b"]
    assert a.base is not None and a.base is b.base
    assert (a == 1.0).all() and (b[0] == 2.0).all() and np.isnan(b[1:]).all()


def test_large_passes_are_not_kept():
    class Big:
        time_s = np.zeros(pass_memo.SHARED_MAX_ELEMENTS + 1)

    @pass_memo.shared(lambda x: x)
    def price(x):
        return Big()

    with pass_memo.shared_passes():
        assert price(1) is not price(1)                 # computed again: too large to keep
        assert len(pass_memo._MEMO.get()) == 0


def test_a_prompt_by_prompt_prefill_is_priced_once_across_chunks(monkeypatch):
    """A runtime that prefills one prompt per pass (compiled: gpt-fast, MagicDec) prices that pass over
    the prompt lengths alone, the target's and the draft's alike; a sweep cut into chunks along the
    batch axis prices each once (the other chunks share them), and every row is still evaluate()
    bit for bit."""
    import importlib
    from tests.test_sweep_stacked import assert_every_row_is_evaluate
    common = importlib.import_module("costmodel.engine.strategies.common")
    calls = []
    real = common._prefill_pass

    def counted(ex, B, P):
        calls.append((ex.model.id, np.shape(B)))
        return real(ex, B, P)

    monkeypatch.setattr(common, "_prefill_pass", counted)
    base = dict(model="llama-2-7b", hardware="a100-80gb", runtime="compiled", strategy="tree", draft_model="llama-68m",
                acceptance_rate=0.7, tree_nodes=8, tree_depth=3, gen_len=64)
    axes = dict(batch_size=list(range(1, 13)), prompt_len=[16, 512, 3000])
    df = sweep(base, workers=1, chunk_rows=9, **axes)               # 4 chunks of 3 batch sizes × 3 prompts
    # one prompt (a batch of one), once for each model
    assert sorted(calls) == [("llama-2-7b", (1, 1)), ("llama-68m", (1, 1))]
    assert_every_row_is_evaluate(df, base, axes)


def test_a_sweep_evaluates_with_a_row_sized_buffer(monkeypatch):
    """Chunks of a grid over 1000 prompt lengths are evaluated with numpy's buffer one row long (992
    elements: fast.arrays.row_buffers; a per-batch operand is then read in place, not copied into
    the buffer), numpy's default again after the sweep; sampled rows are still evaluate() bit for bit."""
    seen = []
    real = sweep_module.evaluate_arrays

    def spy(*a, **kw):
        seen.append(np.getbufsize())
        return real(*a, **kw)

    monkeypatch.setattr(sweep_module, "evaluate_arrays", spy)
    before = np.getbufsize()
    base = dict(model="llama-2-7b", hardware="a100-80gb", strategy="tree", draft_model="llama-68m",
                acceptance_rate=0.7, tree_nodes=8, tree_depth=3, gen_len=64)
    df = sweep(base, workers=1, batch_size=[1, 7, 64], prompt_len=list(range(16, 3016, 3)))
    assert seen and set(seen) == {992} and np.getbufsize() == before
    for i in range(0, len(df), 97):
        row = df.iloc[i]
        want = evaluate(dict(base, batch_size=int(row["batch_size"]), prompt_len=int(row["prompt_len"])))
        for k, w in want.items():
            if isinstance(w, float):
                assert _identical(row[k], w), (i, k, row[k], w)
