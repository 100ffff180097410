"""costmodel.sweep: the vectorised grid equals evaluate() row by row; CLI; Dask engine."""

import json
import math
import os
import random

import numpy as np
import pytest

import costmodel
from costmodel import InputError, evaluate
from costmodel.cli.main import main
from costmodel.analysis.sweep import parse_axis, sweep

# Llama-2-7B dimensions with a 32K context: the grids below run past Llama-2-7B's 4096 tokens
SPEC = dict(model="llama-2-7b-32k", hardware="a100-80gb", strategy="speculative", draft_model="llama-68m",
            acceptance_rate=0.7, gamma=4)


def _same(a, b):
    if isinstance(b, bool) or isinstance(b, str) or b is None:
        return a == b
    if isinstance(a, float) and math.isnan(a):
        return False
    return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def assert_rows_match(df, base, axes, n=25, seed=0):
    """Random rows of ``df`` against evaluate(base | row's axis values)."""
    rng = random.Random(seed)
    names = list(axes)
    for i in sorted(rng.sample(range(len(df)), min(n, len(df)))):
        row = df.iloc[i]
        rec = dict(base)
        for k in names:
            v = row[k]
            rec[k] = v.item() if hasattr(v, "item") else v
        want = evaluate(rec)
        for k, w in want.items():
            if k in axes or isinstance(w, (list, dict)):
                continue
            got = row[k]
            got = got.item() if hasattr(got, "item") else got
            assert _same(got, w), (i, k, got, w, rec)
        extra = [c for c in df.columns if c not in want and c not in axes and not _missing(row[c])]
        assert not extra, (i, extra)


def _missing(v):
    return v is None or (isinstance(v, float) and math.isnan(v))


CASES = [
    ("autoregressive", dict(model="llama-2-7b", hardware="t4"),
     dict(batch_size=[1, 3, 16, 64], prompt_len=[1, 128, 2000], gen_len=[1, 128], weight_dtype=["fp16", "int4"])),
    ("speculative", SPEC,
     dict(batch_size=[1, 2, 32], prompt_len=[16, 512, 4096], gamma=[1, 3, 6], acceptance_rate=[0.0, 0.55, 0.9],
          hardware=["a100-80gb", "h100-sxm"])),
    ("spec-tau-lockstep", dict(SPEC, acceptance_rate=None, batch_sync="lockstep"),
     dict(batch_size=[1, 4, 16], prompt_len=[64, 1024], mean_accepted_tokens=[1.0, 2.5, 3.9],
          draft_model=["llama-68m", "self", "none"], draft_kv_budget=[256, 4096])),
    ("spec-separate", dict(SPEC, draft_placement="separate_device"),
     dict(batch_size=[1, 8], prompt_len=[128, 8000], draft_schedule=["serial", "overlap"],
          runtime=["eager", "compiled", "vllm"])),
    ("tree", dict(model="vicuna-7b", hardware="a100-80gb", strategy="tree", draft_model="llama-68m"),
     dict(batch_size=[1, 4, 16], prompt_len=[128, 1920], acceptance_rate=[0.5, 0.8], tree_nodes=[8, 31],
          attention_kernel=["prefix_aware", "per_branch", "dense_masked"], batch_sync=["ragged", "lockstep"])),
    ("tree-heads", dict(model="vicuna-7b", hardware="h100-sxm", strategy="tree", acceptance_rate=0.7,
                        tree_width=2, tree_depth=3),
     dict(batch_size=[1, 8], prompt_len=[100, 1000], draft_model=["medusa", "eagle", "none"], gen_len=[64, 256])),
    ("shared-prefix", dict(model="llama-2-13b", hardware="a100-80gb", strategy="shared_prefix"),
     dict(batch_size=[1, 4], prompt_len=[512, 2048], n_branches=[1, 4, 16], shared_prefix_len=[0, 256],
          attention_kernel=["prefix_aware", "per_branch", "dense_masked"])),
    ("tp", dict(model="llama-2-70b", hardware="h100-sxm", batch_size=8),
     dict(n_devices=[2, 4, 8], prompt_len=[128, 3968], strategy=["autoregressive", "speculative"],
          draft_model=["llama-68m"], acceptance_rate=[0.6])),
]


@pytest.mark.parametrize("name,base,axes", CASES, ids=[c[0] for c in CASES])
def test_rows_equal_evaluate(name, base, axes):
    df = sweep(base, **axes)
    assert len(df) == int(np.prod([len(v) for v in axes.values()]))
    assert list(df.columns[: len(axes)]) == list(axes)
    assert_rows_match(df, base, axes, n=30)


def test_row_order_is_cartesian_product_with_last_axis_fastest():
    df = sweep(dict(model="llama-2-7b", hardware="t4", prompt_len=64), batch_size=[1, 2, 3],
               hardware=["t4", "l4"], gen_len=[8, 16])
    got = list(zip(df.batch_size, df.hardware, df.gen_len))
    import itertools
    assert got == list(itertools.product([1, 2, 3], ["t4", "l4"], [8, 16]))


def test_chunks_do_not_change_results():
    axes = dict(batch_size=list(range(1, 40)), prompt_len=list(range(1, 4000, 97)), gamma=[2, 5])
    a = sweep(SPEC, **axes)
    b = sweep(SPEC, chunk_rows=100, **axes)
    import pandas as pd
    pd.testing.assert_frame_equal(a, b)


def test_million_row_grid_is_vectorised_and_exact():
    """The benchmark's shape (scaled down): every row bit-identical to evaluate()."""
    axes = dict(batch_size=range(1, 201), prompt_len=range(16, 16001, 160))
    df = sweep(SPEC, **axes)
    assert len(df) == 200 * 100
    assert_rows_match(df, SPEC, axes, n=40, seed=3)


def test_optimal_for_hardware_trees_fall_back_to_rows():
    base = dict(model="vicuna-7b", hardware="a100-80gb", strategy="tree", draft_model="llama-68m",
                acceptance_rate=0.7, tree_nodes=6, tree_shape="optimal_for_hardware")
    axes = dict(batch_size=[1, 8], prompt_len=[128, 1024])
    df = sweep(base, **axes)
    assert_rows_match(df, base, axes, n=4)


def test_text_axes_and_ranges():
    assert parse_axis("prompt_len", "16:64:16") == [16, 32, 48, 64]
    assert parse_axis("batch_size", "1:64:*4") == [1, 4, 16, 64]
    assert parse_axis("acceptance_rate", "0.5:0.8:0.1") == [0.5, 0.6, 0.7, 0.8]
    assert parse_axis("hardware", "t4,l4") == ["t4", "l4"]
    assert parse_axis("rank_acceptance", "0.6,0.2|0.7,0.1") == ["0.6,0.2", "0.7,0.1"]
    assert parse_axis("rank_acceptance", [0.6, 0.2]) == [(0.6, 0.2)]
    assert parse_axis("batch_size", 8) == [8]


@pytest.mark.parametrize("axes,field", [
    (dict(batch_size=[1, 0]), "batch_size"),
    (dict(batch_size=[1, "x"]), "batch_size"),
    (dict(acceptance_rate=[0.5, 1.2]), "acceptance_rate"),
    (dict(hardware=["a100-80gb", "a100-81gb"]), "hardware"),
    (dict(strategy=["speculative", "speculatve"]), "strategy"),
    (dict(prompt_len=[64, 512], shared_prefix_len=[0, 128]), "shared_prefix_len"),
    (dict(mean_accepted_tokens=[2.0, 6.0], acceptance_rate=[None]), "mean_accepted_tokens"),
    (dict(batch_sized=[1]), "batch_sized"),
])
def test_bad_axis_values_name_the_axis(axes, field):
    with pytest.raises(InputError) as e:
        sweep(dict(SPEC, batch_size=1, prompt_len=128), **axes)
    assert e.value.field == field or f"'{field}'" in str(e.value), str(e.value)


def test_exported_from_package():
    assert costmodel.sweep is sweep


def test_output_files(tmp_path):
    axes = dict(batch_size=[1, 2], prompt_len=[16, 32])
    p = tmp_path / "s.csv"
    df = sweep(SPEC, output=p, **axes)
    import pandas as pd
    back = pd.read_csv(p)
    assert list(back.columns) == list(df.columns) and len(back) == 4
    with pytest.raises(InputError):
        sweep(SPEC, output=tmp_path / "s.xlsx", **axes)


def test_cli_sweep_csv_and_json(tmp_path, capsys):
    words = ["sweep", "model=llama-2-7b", "hardware=a100-80gb", "batch_size=1,4", "prompt_len=16:48:16"]
    assert main(words + ["--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 6 and out["axes"] == ["batch_size", "prompt_len"]
    assert main(words + ["--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 7 and lines[0].startswith("batch_size,prompt_len,")
    f = tmp_path / "g.csv"
    assert main(words + ["--output", str(f)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""                        # no progress bar when stderr is not a terminal
    assert f.read_text().count("\n") == 7
    assert main(["sweep", "model=llama-2-7b", "hardware=a100-80gb", "prompt_len=16", "batch_size=0,1"]) == 2
    assert "batch_size" in capsys.readouterr().err


def test_cli_table(capsys):
    assert main(["sweep", "model=llama-2-7b", "hardware=t4,l4", "batch_size=1", "prompt_len=64"]) == 0
    out = capsys.readouterr().out
    assert "t4" in out and "l4" in out and "step ms" in out


# --------------------------------------------------------------------------------------- dask

def _dask():
    return pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    distributed = _dask()
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as c:
        yield c


DASK_AXES = dict(hardware=["a100-80gb", "h100-sxm"], strategy=["autoregressive", "speculative"],
                 batch_size=list(range(1, 30, 3)), prompt_len=list(range(16, 4000, 250)))


def test_dask_equals_in_process(cluster):
    import pandas as pd
    base = dict(model="llama-2-7b", draft_model="llama-68m", acceptance_rate=0.7)
    want = sweep(base, **DASK_AXES)
    got = sweep(base, engine="dask", scheduler=cluster.scheduler_address, chunk_rows=70, **DASK_AXES)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.astype(got.dtypes.to_dict()),
                                  check_dtype=False)
    text = [c for c in want.columns if want[c].dtype == "category"]
    assert {"hardware", "strategy", "model", "bound", "notes"} <= set(text)
    assert all(got[c].dtype == want[c].dtype for c in text)         # the same categories, in order


def test_dask_partitioned_parquet(cluster, tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd
    base = dict(model="llama-2-7b", draft_model="llama-68m", acceptance_rate=0.7)
    want = sweep(base, **DASK_AXES)
    out = tmp_path / "grid.parquet"
    seen = []
    path = sweep(base, engine="dask", scheduler=cluster.scheduler_address, chunk_rows=100, output=out,
                 progress=lambda d, t: seen.append((d, t)), **DASK_AXES)
    parts = sorted(os.listdir(path))
    assert len(parts) > 1 and all(p.startswith("part.") for p in parts)
    got = pd.concat([pd.read_parquet(os.path.join(path, p)) for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(got, want.astype(got.dtypes.to_dict()), check_dtype=False)
    assert seen[-1] == (len(want), len(want))


def test_dask_missing_gives_install_hint(monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name.split(".")[0] in ("distributed", "dask"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(InputError, match="pip install"):
        sweep(SPEC, engine="dask", batch_size=[1, 2], prompt_len=[16])


# ------------------------------------------------------------------- the roofline's fast paths

def _ref_op_time(op, ex):
    """op_time as first written: the stacked terms' max and argmax."""
    from costmodel.engine.roofline import op_terms
    stack = np.stack(np.broadcast_arrays(*op_terms(op, ex)))
    return stack.max(axis=0), stack.argmax(axis=0)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "OUS" or b.dtype.kind in "OUS":
        return a.shape == b.shape and bool(np.all(a == b))
    a, b = np.ascontiguousarray(a, dtype=float), np.ascontiguousarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


@pytest.mark.parametrize("setup", [
    dict(model="llama-2-7b", hardware="a100-80gb"),
    dict(model="llama-2-70b", hardware="h100-sxm", n_devices=4),
    dict(model="mixtral-8x7b", hardware="l40s", runtime="eager", n_devices=2),
])
def test_pass_cost_is_bit_identical_to_the_reference(setup):
    """pass_cost.pass_cost (in-place accumulation, skipped +0.0 terms, scalar fast path) against the
    formulas as first written, on scalars and broadcast arrays, with zeros, infinities and NaNs."""
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.ops import PassShape, layer_ops
    from costmodel.inputs.record import parse_record
    from costmodel.engine.roofline import Cost, reference_pass_cost, op_time
    from costmodel.engine.pass_cost import pass_cost
    ex = build_exec(parse_record(dict(setup, batch_size=1, prompt_len=1)))
    rng = np.random.default_rng(7)
    B = np.array([1.0, 3.0, 64.0, 700.0]).reshape(-1, 1)
    P = np.array([0.0, 1.0, 200.0, 5000.0, 70000.0]).reshape(1, -1)
    shapes = [PassShape(tokens=8.0, pairs=8.0 * 300, kv_hbm_tokens=8.0 * 300),
              PassShape(tokens=B * 5, pairs=B * (5 * P + 15), kv_hbm_tokens=B * P, lm_tokens=B * 5),
              PassShape(tokens=B * P, pairs=B * P * (P + 1) / 2, kv_hbm_tokens=B * P, lm_tokens=B,
                        kv_l2_tokens=B * P / 3, attn_kernels=2.0),
              PassShape(tokens=np.array([0.0, 1.0, np.inf]), pairs=np.array([0.0, 5.0, 1e30]),
                        kv_hbm_tokens=np.array([0.0, 2.0, 3.0])),
              PassShape(tokens=np.array([1.0, np.nan, 4.0]), pairs=np.array([1.0, 2.0, -3.0]),
                        kv_hbm_tokens=np.array([-0.0, 2.0, 3.0])),
              PassShape(tokens=rng.uniform(1, 1e5, (6, 7)), pairs=rng.uniform(0, 1e9, (6, 7)),
                        kv_hbm_tokens=rng.uniform(0, 1e6, (1, 7)))]
    with np.errstate(all="ignore"):
        for sh in shapes:
            got, want = pass_cost(sh, ex), reference_pass_cost(sh, ex, layer_ops(sh, ex))
            for f in ("time_s", "flops", "hbm_bytes"):
                assert _bits_equal(getattr(got, f), getattr(want, f)), f
            assert list(got.by_bound) == list(want.by_bound)
            for b in want.by_bound:
                assert _bits_equal(got.by_bound[b], want.by_bound[b]), b
            assert len(got.ops) == len(want.ops)
            for r1, r2 in zip(got.ops, want.ops):
                assert r1[0] == r2[0] and all(_bits_equal(x, y) for x, y in zip(r1[1:], r2[1:])), r1[0]
            stack = np.stack([np.broadcast_to(want.by_bound[b], np.shape(want.time_s)) for b in want.by_bound])
            assert _bits_equal(got.bound(), np.asarray(list(want.by_bound), dtype=object)[np.argmax(stack, 0)])
            for op in layer_ops(sh, ex):
                t1, i1 = op_time(op, ex)
                t2, i2 = _ref_op_time(op, ex)
                assert _bits_equal(t1, t2) and np.array_equal(i1, i2), op.name
            assert isinstance(got, Cost)


def test_grid_is_refused_exactly_when_a_row_is_invalid():
    """The vectorised checks agree with parse_record row by row (random small grids)."""
    import itertools
    from costmodel.inputs.record import parse_record
    rng = random.Random(11)
    bases = [dict(SPEC, acceptance_rate=None), dict(model="llama-2-13b", hardware="a100-80gb",
                                                   strategy="shared_prefix", n_branches=4)]
    pools = dict(prompt_len=[1, 64, 300], shared_prefix_len=[0, 50, 200, 400], gamma=[1, 2, 5],
                 mean_accepted_tokens=[0.5, 1.0, 2.0, 3.5, 6.5], acceptance_rate=[0.0, 0.5, 0.8, 0.99, 1.0])
    for trial in range(30):
        base = dict(rng.choice(bases), batch_size=2, prompt_len=256)
        names = rng.sample(sorted(pools), rng.randint(1, 3))
        axes = {n: rng.sample(pools[n], rng.randint(1, 3)) for n in names}
        if "mean_accepted_tokens" not in axes and "acceptance_rate" not in axes and base["strategy"] == "speculative":
            base["acceptance_rate"] = 0.6
        bad_row = None
        for combo in itertools.product(*axes.values()):
            try:
                parse_record(dict(base, **dict(zip(axes, combo))))
            except InputError:
                bad_row = combo
                break
        if bad_row is None:
            assert len(sweep(base, **axes)) == int(np.prod([len(v) for v in axes.values()]))
        else:
            with pytest.raises(InputError):
                sweep(base, **axes)


# ------------------------------------------- affine operators: the binding term from the range's ends

@pytest.mark.parametrize("setup", [
    dict(model="llama-2-7b", hardware="a100-80gb"),
    dict(model="llama-68m", hardware="t4", runtime="eager"),
    dict(model="llama-2-70b", hardware="h100-sxm", n_devices=4, weight_dtype="int4"),
])
def test_dominant_term_agrees_with_the_reference_and_fires(setup):
    """On grids large enough for the shortcut (>= 2048 elements), every operator's (time, bound)
    equals the stacked max/argmax bit for bit, whether or not the shortcut settled it; and it does
    settle some (a prefill of 33-64 × 16-16000 tokens: GEMMs compute-bound at both ends, norms
    memory-bound), so the test exercises it."""
    from costmodel.engine import pass_cost as rf
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.ops import AffineOp, layer_ops
    from costmodel.inputs.record import parse_record
    from costmodel.engine.roofline import reference_pass_cost
    from costmodel.engine.pass_cost import pass_cost
    from costmodel.engine.strategies.common import decode_shape, prefill_shape
    ex = build_exec(parse_record(dict(setup, batch_size=1, prompt_len=1)))
    B = np.arange(33.0, 65.0).reshape(-1, 1)
    P = np.arange(16.0, 16001.0, 16.0).reshape(1, -1)
    fired = 0
    for sh in (prefill_shape(B, P), prefill_shape(B - 32.0, P), decode_shape(B * 40, 5.0, P)):
        for op in layer_ops(sh, ex):
            want_t, want_i = _ref_op_time(op, ex)
            if type(op) is AffineOp and rf._ends(op.x) is not None:
                got = rf._dominant_term(op, ex, rf._ends(op.x))
                if got is not None:
                    fired += 1
                    assert _bits_equal(got[0], want_t), op.name
                    assert np.all(np.broadcast_to(got[1], np.shape(want_i)) == want_i), op.name
        got_c, want_c = pass_cost(sh, ex), reference_pass_cost(sh, ex)
        for f in ("time_s", "flops", "hbm_bytes"):
            assert _bits_equal(getattr(got_c, f), getattr(want_c, f)), f
        for b in want_c.by_bound:
            assert _bits_equal(np.broadcast_to(got_c.by_bound[b], np.shape(want_c.time_s)),
                               np.broadcast_to(want_c.by_bound[b], np.shape(want_c.time_s))), b
    assert fired >= 5


def test_dominant_term_declines_near_ties_and_bad_values():
    """Synthetic affine operators (hypothesis-style random coefficients, but seeded): a crossing
    inside the range, a tie within the margin, NaN and infinite ends -> None (the plain path);
    otherwise the shortcut's answer is the stacked max/argmax bit for bit."""
    from costmodel.engine import pass_cost as rf
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.ops import AffineOp
    from costmodel.inputs.record import parse_record
    ex = build_exec(parse_record(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=1)))
    peak, bw = ex.matrix_flops_per_s, ex.hbm_bytes_per_s
    rng = np.random.default_rng(3)
    x = np.linspace(100.0, 1e6, 4096).reshape(64, 64)
    # memory-bound at x = 100 (weights dominate), compute-bound at 1e6: the crossing is inside
    cross = AffineOp("gemm", "matrix", 1, x, f1=2.0 * 1e8, h0=1e8 * 2.0, h1=1.0)
    assert rf._dominant_term(cross, ex, rf._ends(x)) is None
    # compute and memory equal at every x (to the last bit of the coefficients): a tie, declined
    tie = AffineOp("vec", "matrix", 1, x, f1=peak / bw, h0=0.0, h1=1.0)
    assert rf._dominant_term(tie, ex, rf._ends(x)) is None
    bad = x.copy()
    bad[3, 3] = np.nan
    assert rf._ends(bad) is None
    inf = x.copy()
    inf[0, 0] = np.inf
    assert rf._dominant_term(AffineOp("g", "matrix", 1, inf, f1=2e9, h0=1.0, h1=1.0), ex, rf._ends(inf)) is None
    for _ in range(200):
        f1, h0, h1 = 10 ** rng.uniform(0, 12), 10 ** rng.uniform(0, 12) * rng.integers(0, 2), 10 ** rng.uniform(-3, 6)
        op = AffineOp("r", "matrix", 1, x * rng.uniform(0.5, 2.0), f1=f1, h0=h0, h1=h1)
        got = rf._dominant_term(op, ex, rf._ends(op.x))
        if got is not None:
            want_t, want_i = _ref_op_time(op, ex)
            assert _bits_equal(got[0], want_t) and np.all(want_i == got[1])


# ----------------------------------------------------------------- forked workers (_sweep_fork)

def _sweep_module(monkeypatch=None):
    """costmodel.sweep (the package exports a function of that name); with ``monkeypatch``, forking
    allowed even if an earlier test left threads behind (a Dask cluster's, say): these tests check
    the forked path itself, test_no_fork_while_other_threads_run the guard."""
    import importlib
    sw = importlib.import_module("costmodel.analysis.sweep")
    if monkeypatch is not None:
        monkeypatch.setattr(sw, "can_fork", lambda: True)
    return sw


def _frames_identical(a, b):
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        assert x.dtype == y.dtype, c
        if x.dtype == float:
            assert np.array_equal(x.view(np.int64), y.view(np.int64)), c
        else:
            assert (x == y).all(), c


def test_forked_workers_give_the_single_process_frame(monkeypatch):
    """Two processes (the child's chunks copied into the parent's columns): the same frame, bit for
    bit, text columns (bound codes, constant model/hardware/strategy) included, and the forked path
    is the one taken."""
    sw = _sweep_module(monkeypatch)
    calls = []
    real = sw.evaluate_forked
    monkeypatch.setattr(sw, "evaluate_forked", lambda *a, **k: calls.append(1) or real(*a, **k))
    axes = dict(batch_size=range(1, 41), prompt_len=range(16, 4001, 16))
    one = sweep(SPEC, workers=1, chunk_rows=1000, **axes)
    two = sweep(SPEC, workers=2, chunk_rows=1000, **axes)
    assert calls == [1]
    _frames_identical(one, two)
    assert set(two["bound"]) <= {"compute", "memory", "l2", "interconnect", "launch"}
    assert list(two["bound"].cat.categories) == sorted(set(two["bound"])) and (two["model"] == SPEC["model"]).all()
    assert two["model"].dtype == one["model"].dtype == "category"


def test_forked_workers_three_axes_and_broadcast_columns(monkeypatch):
    """Three numeric axes (chunks cut along the first): a child's columns travel in compact form
    (a column broadcast along a dimension, such as the weights' bytes, stored once) and are
    broadcast back into the grid; the frame equals the single-process one bit for bit."""
    sw = _sweep_module(monkeypatch)
    axes = dict(batch_size=range(1, 21), gen_len=[64, 128, 256], prompt_len=range(16, 1601, 16))
    one = sweep(SPEC, workers=1, chunk_rows=600, **axes)
    two = sweep(SPEC, workers=2, chunk_rows=600, **axes)
    _frames_identical(one, two)
    assert two["weights_bytes"].nunique() == 1 and two["step_latency_s"].nunique() > 1000


def test_forked_worker_errors_reach_the_caller(monkeypatch):
    """An input error in a child is raised in the parent as the same InputError; any other error as
    a RuntimeError naming it. (The chunks are dealt from a queue: only the child raises here.)"""
    import os
    sw = _sweep_module(monkeypatch)
    real = sw._run_piece
    parent = os.getpid()
    axes = dict(batch_size=range(1, 41), prompt_len=range(16, 4001, 16))
    for exc, kind in ((InputError("bad row", source="test", field="batch_size"), InputError),
                      (ValueError("boom"), RuntimeError)):
        def run(task, exc=exc):
            if os.getpid() != parent:                                 # a chunk the child took
                raise exc
            return real(task)
        monkeypatch.setattr(sw, "_run_piece", run)
        with pytest.raises(kind) as e:
            sweep(SPEC, workers=2, chunk_rows=1000, **axes)
        assert ("bad row" in str(e.value)) if kind is InputError else ("ValueError: boom" in str(e.value))


def test_forked_workers_fall_back_when_a_column_changes_kind(monkeypatch):
    """A chunk whose column kind differs from the first chunk's (here an integer column turning
    float) sends the grid back to one process: the frame equals the single-process one."""
    sw = _sweep_module(monkeypatch)
    real = sw._run_piece

    def run(task):
        res = real(task)
        if task[1][0][0].start and task[1][0][0].start >= 30:
            res = dict(res, n_devices=1.5)
        return res
    monkeypatch.setattr(sw, "_run_piece", run)
    axes = dict(batch_size=range(1, 41), prompt_len=range(16, 4001, 16))
    _frames_identical(sweep(SPEC, workers=1, chunk_rows=1000, **axes),
                      sweep(SPEC, workers=2, chunk_rows=1000, **axes))


def test_forked_workers_fall_back_when_a_childs_columns_differ(monkeypatch):
    """Each process learns the columns from the first chunk it evaluates; a child whose columns
    differ from the parent's (here one more key) sends the grid back to one process: the frame
    equals the single-process one, without the extra key."""
    import os
    sw = _sweep_module(monkeypatch)
    real = sw._run_piece
    parent = os.getpid()

    def run(task):
        res = real(task)
        return dict(res, extra_s=0.5) if os.getpid() != parent else res
    monkeypatch.setattr(sw, "_run_piece", run)
    axes = dict(batch_size=range(1, 41), prompt_len=range(16, 4001, 16))
    two = sweep(SPEC, workers=2, chunk_rows=1000, **axes)
    monkeypatch.setattr(sw, "_run_piece", real)
    _frames_identical(sweep(SPEC, workers=1, chunk_rows=1000, **axes), two)
    assert "extra_s" not in two.columns


def test_forked_workers_fall_back_when_the_columns_do_not_fit_a_slot(monkeypatch):
    """A chunk's columns that need more bytes per row than a slot of the shared ring reserves: the
    grid is evaluated in one process, the same frame."""
    from costmodel.fast import sweep_fork
    sw = _sweep_module(monkeypatch)
    monkeypatch.setattr(sweep_fork, "RING_ROW_BYTES", 8)          # one float64 column per row
    monkeypatch.setattr(sweep_fork, "_KEPT", [None])
    calls = []
    real = sw.evaluate_forked
    monkeypatch.setattr(sw, "evaluate_forked", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])
    axes = dict(batch_size=range(1, 41), prompt_len=range(16, 4001, 16))
    two = sweep(SPEC, workers=2, chunk_rows=1000, **axes)
    assert calls == [None]                                          # the forked path gave up
    _frames_identical(sweep(SPEC, workers=1, chunk_rows=1000, **axes), two)


def test_no_fork_while_other_threads_run(monkeypatch):
    """Forking a process with other threads could deadlock a child: then threads evaluate the grid."""
    import threading
    sw = _sweep_module()
    calls = []
    monkeypatch.setattr(sw, "evaluate_forked", lambda *a, **k: calls.append(1))
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        axes = dict(batch_size=range(1, 41), prompt_len=range(16, 4001, 16))
        df = sweep(SPEC, workers=2, chunk_rows=1000, **axes)
    finally:
        stop.set()
        t.join()
    assert calls == [] and len(df) == 40 * 250
