"""A ``hardware`` axis priced as an array (HardwareStack): every row still equals evaluate() bit for
bit, whatever the axis order, chunking, links or invalid rows, and the grid becomes a few blocks."""

import math

import numpy as np
import pytest

from costmodel import evaluate
from costmodel.analysis import sweep as sweep_module
from costmodel.analysis.sweep import sweep
from costmodel.analysis.sweep_grid import group_blocks, plan_axes, runs
from costmodel.engine.evaluate import hardware_signature
from costmodel.inputs.hardware import load_hardware, stack_hardware
from costmodel.inputs.record import parse_record

# devices per node: a100-80gb 8, h100-pcie 2, t4 4, l4 8: four devices on 2 and 4 per node use the
# network for their all-reduces on h100-pcie only, eight devices on h100-pcie and t4
GPUS = ["a100-80gb", "h100-pcie", "t4", "l4"]
SPEC = dict(draft_model="llama-68m", acceptance_rate=0.7, gamma=4)


def _identical(got, want) -> bool:
    """The same value: floats bit for bit (NaN as NaN), everything else by ==."""
    if isinstance(want, float):
        got = float(got)
        return (math.isnan(got) and math.isnan(want)) or (got == want and math.copysign(1, got) == math.copysign(1, want))
    if isinstance(want, list):
        return got == ",".join(str(x) for x in want)
    return got == want


def assert_every_row_is_evaluate(df, base, axes, notes: bool = False):
    names = list(axes)
    for i in range(len(df)):
        row = df.iloc[i]
        rec = dict(base, **{k: (row[k].item() if hasattr(row[k], "item") else row[k]) for k in names})
        want = evaluate(rec)
        for k, w in want.items():
            if k in axes or (k == "notes" and not notes):
                continue
            got = row[k]
            got = got.item() if hasattr(got, "item") else got
            assert _identical(got, w), (i, k, got, w, rec)


@pytest.mark.parametrize("axes", [
    dict(hardware=GPUS, n_devices=[1, 2, 4, 8], strategy=["autoregressive", "speculative"],
         weight_dtype=["fp16", "int4"], batch_size=[1, 16, 256], prompt_len=[128, 3968]),   # 3968 + 128 = max_context
    # hardware after a numeric axis and between two group axes: its dimension is not the first
    dict(batch_size=[1, 64], weight_dtype=["int8", "fp16"], hardware=GPUS, n_devices=[8, 2], prompt_len=[512, 2048]),
], ids=["hardware-first", "hardware-inside"])
def test_stacked_hardware_rows_are_bit_identical(axes):
    base = dict(SPEC, model="llama-2-7b")
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes)


def test_draft_on_its_own_device_fp8_and_pipeline_stages():
    """fp8 weights run weight-only where a device has no fp8 units (and the note names the device):
    one block per device; a separate draft device and pipeline stages take per-device links."""
    base = dict(SPEC, model="llama-2-13b", strategy="speculative", draft_placement="separate_device",
                pipeline_parallel=2)
    axes = dict(hardware=GPUS + ["h100-sxm", "b200"], weight_dtype=["fp8", "nvfp4", "fp16"], n_devices=[2, 4],
                batch_size=[1, 32],
                prompt_len=[256])
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes)
    for i in range(len(df)):
        row = df.iloc[i]
        want = evaluate(dict(base, **{k: (row[k].item() if hasattr(row[k], "item") else row[k]) for k in axes}))
        assert row["notes"] == ",".join(want["notes"])


def test_only_the_hardware_varies_and_chunks_cut_the_device_axis():
    base = dict(model="llama-2-7b", batch_size=8, prompt_len=1000)
    df = sweep(base, workers=1, hardware=GPUS)
    assert_every_row_is_evaluate(df, base, dict(hardware=GPUS))
    axes = dict(hardware=GPUS * 2, batch_size=[1, 2, 3], prompt_len=[10, 20])
    whole = sweep(base, workers=1, **axes)
    cut = sweep(base, workers=1, chunk_rows=5, **axes)    # 6 rows per device: cut along hardware
    assert whole.equals(cut)
    assert_every_row_is_evaluate(cut, base, axes)


def test_invalid_groups_are_marked_and_valid_rows_stay_exact():
    """llama-68m has 12 attention heads: 8 devices are refused for every device; the rest is exact."""
    base = dict(SPEC, model="llama-68m", strategy="speculative")
    axes = dict(hardware=GPUS, n_devices=[4, 8], batch_size=[1, 64], prompt_len=[128, 1024])
    df = sweep(base, workers=1, on_invalid="mark", **axes)
    bad = df["n_devices"] == 8
    assert df.loc[bad, "invalid_reason"].str.contains("does not divide").all()
    assert df.loc[bad, "step_latency_s"].isna().all()
    ok = df[~bad].reset_index(drop=True)
    assert ok["invalid_reason"].isna().all()
    assert_every_row_is_evaluate(ok.drop(columns="invalid_reason"), base, axes)
    # the reasons name each row's own device, as a grid of that device alone gives them
    for g in GPUS:
        alone = sweep(base, workers=1, on_invalid="mark", **dict(axes, hardware=[g]))
        mine = df[df["hardware"] == g].reset_index(drop=True)
        assert alone["invalid_reason"].equals(mine["invalid_reason"])
        assert "hardware=" + g in alone["invalid_reason"].dropna().iloc[0]


def test_the_capacity_grid_is_a_few_blocks():
    """Every device of one (model, strategy, dtype) group in one block (each device takes its own
    links inside the stack), every device count together (one device's all-reduce is 0 s element by
    element), except under the custom all-reduce (one link type decides it for the whole stack);
    fp8 weights one block per device."""
    base = dict(SPEC, batch_size=1, prompt_len=128)
    axes = plan_axes(base, dict(hardware=GPUS, model=["llama-2-7b"], n_devices=[1, 4, 8],
                                strategy=["autoregressive", "speculative"], batch_size=[1, 2]))
    blocks = group_blocks(base, axes)
    assert [b.members for b in blocks] == [{"n_devices": [0, 1, 2], "hardware": [0, 1, 2, 3]}] * 2
    assert [b.counts for b in blocks] == [(1, 4, 8)] * 2
    axes = plan_axes(base, dict(hardware=GPUS, model=["llama-2-7b"], n_devices=[1, 4, 8],
                                allreduce_algorithm=["custom"], batch_size=[1, 2]))
    blocks = group_blocks(base, axes)
    assert [b.members for b in blocks] == [{"n_devices": [1, 2], "hardware": [0, 1, 2, 3]}, {"hardware": [0, 1, 2, 3]}]
    assert [b.index.get("n_devices") for b in blocks] == [None, 0] and blocks[0].counts == (4, 8)
    base = dict(base, model="llama-2-7b")
    axes = plan_axes(base, dict(hardware=GPUS, weight_dtype=["fp8", "int4"], batch_size=[1, 2]))
    assert [b.members["hardware"] for b in group_blocks(base, axes)] == [[0], [1], [2], [3], [0, 1, 2, 3]]


def test_each_device_of_a_stack_takes_its_own_links():
    from costmodel.engine.parallel import draft_link, tp_link

    devices = [load_hardware(g) for g in GPUS]
    s = stack_hardware(devices, (4,))
    # 8 devices: a node of 8 on a100-80gb and l4 (scale-up); 2 and 4 per node on h100-pcie and t4
    want = [d.scale_up if d.devices_per_node >= 8 else d.network for d in devices]
    assert tp_link(s, 8).bandwidth_bytes_per_s.tolist() == [w.bandwidth_bytes_per_s for w in want]
    assert tp_link(s, 8).latency_s.tolist() == [w.latency_s for w in want]
    # a draft next to 4 target devices: a free device in the node except on h100-pcie (2) and t4 (4)
    want = [d.network if d.devices_per_node <= 4 else d.scale_up for d in devices]
    assert draft_link(s, 4, "separate_device").latency_s.tolist() == [w.latency_s for w in want]
    rec = parse_record(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=1, weight_dtype="fp8"))
    assert hardware_signature(rec, devices[0]) != hardware_signature(rec, devices[1])


def test_stack_reads_each_member():
    a, t = load_hardware("a100-80gb"), load_hardware("t4")
    s = stack_hardware([a, t], (2, 1))
    assert s.bandwidth_bytes_per_s.tolist() == [[a.bandwidth_bytes_per_s], [t.bandwidth_bytes_per_s]]
    assert s.matrix_peak("fp16").ravel().tolist() == [a.matrix_peak("fp16"), t.matrix_peak("fp16")]
    assert s.scale_up.latency_s.ravel().tolist() == [a.scale_up.latency_s, t.scale_up.latency_s]


def test_runs_split_a_member_list_into_slices():
    # members 0, 2, 3 of axis 1; axis 0 fixed: the non-integer components are (members, axis 2)
    assert runs((4, [0, 2, 3], slice(None))) == [((4, slice(0, 1), slice(None)), 0, (0, 1)),
                                                  ((4, slice(2, 4), slice(None)), 0, (1, 3))]
    assert runs((1, slice(None))) == [((1, slice(None)), None, None)]


def test_a_single_stacked_block_on_forked_workers(monkeypatch):
    base = dict(model="llama-2-7b", prompt_len=512)
    axes = dict(hardware=GPUS[:1] + GPUS[3:], batch_size=list(range(1, 2001)))   # 8 per node: one block
    monkeypatch.setattr(sweep_module, "can_fork", lambda: True)   # threads an earlier test left behind
    one = sweep(base, workers=1, chunk_rows=500, **axes)
    forked = []
    real = sweep_module.evaluate_forked
    monkeypatch.setattr(sweep_module, "evaluate_forked", lambda *a, **k: forked.append(1) or real(*a, **k))
    two = sweep(base, workers=2, chunk_rows=500, **axes)
    assert forked and one.equals(two)


def test_many_groups_on_forked_workers_give_the_single_process_frame(monkeypatch):
    base = dict(SPEC, batch_size=4, prompt_len=256)
    axes = dict(hardware=GPUS, model=["llama-2-7b", "llama-68m"], strategy=["autoregressive", "speculative"],
                n_devices=[1, 8], gen_len=[16, 64])
    monkeypatch.setattr(sweep_module, "can_fork", lambda: True)
    one = sweep(base, workers=1, on_invalid="mark", **axes)
    calls = []
    real = sweep_module.map_forked
    monkeypatch.setattr(sweep_module, "map_forked", lambda *a, **k: calls.append(1) or real(*a, **k))
    two = sweep(base, workers=2, on_invalid="mark", **axes)
    assert calls and one.equals(two)
    assert one["invalid_reason"].notna().sum() == 4 * 2 * 2      # llama-68m on 8 devices


def test_by_default_several_groups_over_arrays_stay_in_this_process(monkeypatch):
    """workers left to its default: a grid of several groups over arrays is evaluated here (sending
    its arrays back from forked processes or taking turns on threads measured slower at every size);
    one group, or groups evaluated row by row, use the CPUs; an explicit workers=2 is honoured."""
    base = dict(SPEC, batch_size=4, prompt_len=256)
    axes = dict(hardware=GPUS, model=["llama-2-7b", "llama-68m"], strategy=["autoregressive", "speculative"],
                n_devices=[1, 8], gen_len=[16, 64])             # four blocks (llama-68m: not on 8 devices)
    monkeypatch.setattr(sweep_module, "can_fork", lambda: True)
    monkeypatch.setattr(sweep_module, "_workers", lambda n, default=None: 2 if n is None else n)    # two CPUs
    used = []
    monkeypatch.setattr(sweep_module, "map_forked", lambda run, tasks, w: used.append(("forked", w)) or
                        [run(t) for t in tasks])
    real_map = sweep_module._map
    monkeypatch.setattr(sweep_module, "_map", lambda fn, items, w: used.append(("map", w)) or real_map(fn, items, 1))
    default = sweep(base, on_invalid="mark", **axes)
    assert used == [("map", 1)]
    used.clear()
    explicit = sweep(base, workers=2, on_invalid="mark", **axes)
    assert used == [("forked", 2)] and default.equals(explicit)
    used.clear()
    rowwise = dict(base, strategy="tree", tree_nodes=8, tree_shape="optimal_for_hardware", model="llama-2-7b")
    sweep(rowwise, hardware=GPUS[:2], batch_size=[1, 2])          # two groups, each row by row
    assert used == [("forked", 2)]


def test_an_error_in_a_forked_worker_reaches_the_caller():
    from costmodel import InputError
    from costmodel.fast.sweep_fork import map_forked

    def run(t):
        if t == 3:
            raise InputError("bad row", field="batch_size")
        return t * 2

    assert map_forked(lambda t: t * 2, list(range(7)), 2) == [0, 2, 4, 6, 8, 10, 12]
    with pytest.raises(InputError, match="bad row"):
        map_forked(run, list(range(7)), 2)           # task 3 runs in the child


def test_a_refused_grid_names_its_first_refused_row_in_grid_order():
    """llama-68m (12 heads) on 8 devices is refused: with n_devices first, the first refused row
    in grid order is (8, llama-68m, a100-80gb), however the groups are stacked."""
    from costmodel import InputError

    with pytest.raises(InputError) as err:
        sweep(dict(SPEC, batch_size=1, prompt_len=64), n_devices=[8, 2], model=["llama-2-7b", "llama-68m"],
              hardware=["a100-80gb", "t4"], strategy=["autoregressive", "speculative"])
    assert "sweep (n_devices=8, model=llama-68m, hardware=a100-80gb, strategy=autoregressive)" in str(err.value)


def test_device_counts_as_an_array_per_element():
    """n_devices 2, 4, 8 in one block: each count's own heads per device, KV heads (rounded up),
    all-reduce and link; identical to evaluate() for each."""
    base = dict(model="llama-2-13b", hardware="h100-pcie", prompt_len=2048, weight_dtype="int8")
    axes = dict(n_devices=[2, 4, 8], batch_size=[1, 32], strategy=["autoregressive", "shared_prefix"])
    df = sweep(dict(base, n_branches=4, shared_prefix_len=1024), workers=1, **axes)
    assert_every_row_is_evaluate(df, dict(base, n_branches=4, shared_prefix_len=1024), axes)


@pytest.mark.parametrize("model", ["mistral-7b", "llama-2-70b"])
def test_device_counts_as_an_array_under_a_gqa_kernel_for_some_groups_only(model):
    """TensorRT-LLM 0.9 has its grouped (XQA) kernel for 8 query heads per KV head only: Mistral-7B
    (4 per KV head) re-reads its KV per query head, Llama-2-70B (8) does not; an array of device counts
    gives evaluate()'s rows for either."""
    base = dict(model=model, hardware="h100-sxm", prompt_len=2048, runtime="trt-llm@0.9", weight_dtype="fp8")
    axes = dict(n_devices=[2, 4, 8], batch_size=[1, 64])
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes)


@pytest.mark.parametrize("model", ["deepseek-v3", "gpt-oss-120b", "gemma-2-9b"])
def test_stacked_rows_for_mla_moe_and_windowed_attention(model):
    """MLA (one latent per rank), MoE with shared experts, windowed attention: every row of a
    hardware × device-count stack is still evaluate()'s."""
    base = dict(model=model, prompt_len=4096, weight_dtype="int4")
    axes = dict(hardware=["h100-sxm", "mi300x", "b200", "a100-80gb"], n_devices=[2, 4, 8], batch_size=[1, 64])
    df = sweep(base, workers=1, on_invalid="mark", **axes)
    ok = df[df["invalid_reason"].isna()].drop(columns="invalid_reason").reset_index(drop=True)
    assert len(ok)
    assert_every_row_is_evaluate(ok, base, axes)


def test_one_device_all_reduce_is_zero_in_an_array_of_counts():
    """S = 1e6 bytes over α = 1 µs, β = 1e11 B/s. ring 2(n−1)α + 2(n−1)/n·S/β: n = 2 → 2e-6 + 1e-5 =
    1.2e-5 s, n = 8 → 1.4e-5 + 1.75e-5 = 3.15e-5 s; tree 2·log2(n)·α + 2·S/β: n = 2 → 2e-6 + 2e-5 =
    2.2e-5 s (for n = 1 the formula would give 2e-5 s: one device runs no all-reduce, 0 s)."""
    from costmodel.engine.parallel import allreduce_time_s
    from costmodel.inputs.hardware import Link
    link = Link(type="nvlink", bandwidth_bytes_per_s=1e11, latency_s=1e-6)
    ring = allreduce_time_s(1e6, np.array([1, 2, 8]), link, "ring")
    assert ring[0] == 0.0 and ring[1] == pytest.approx(1.2e-5, rel=1e-12) and ring[2] == pytest.approx(3.15e-5, rel=1e-12)
    tree = allreduce_time_s(1e6, np.array([1, 2]), link, "tree")
    assert tree[0] == 0.0 and tree[1] == pytest.approx(2.2e-5, rel=1e-12)
    for alg in ("ring", "tree", "auto"):          # each count > 1 as alone, bit for bit
        got = allreduce_time_s(1e6, np.array([1, 2, 8]), link, alg)
        assert got[1] == allreduce_time_s(1e6, 2, link, alg) and got[2] == allreduce_time_s(1e6, 8, link, alg)


@pytest.mark.parametrize("alg", ["auto", "ring", "custom"])
def test_one_device_with_larger_counts_is_each_count_alone(alg):
    """n_devices 1, 2, 8 in one block: every column of every row (those evaluate() leaves out
    included: NaN or None) equals the grid of that device count alone."""
    base = dict(SPEC, model="llama-2-7b", strategy="speculative", allreduce_algorithm=alg)
    axes = dict(hardware=GPUS, n_devices=[1, 2, 8], batch_size=[1, 64], prompt_len=[128, 2048])
    df = sweep(base, workers=1, **axes)
    for n in (1, 2, 8):
        alone = sweep(base, workers=1, **dict(axes, n_devices=[n])).reset_index(drop=True)
        mine = df[df["n_devices"] == n].reset_index(drop=True)
        assert len(mine) == len(alone) == 16          # 4 devices × 2 batches × 2 prompts
        for c in df.columns:
            if c not in alone.columns:
                assert mine[c].isna().all(), (n, c)
                continue
            a, b = mine[c].to_numpy(), alone[c].to_numpy()
            if a.dtype.kind == "f":
                assert np.array_equal(a.view(np.int64), b.astype(float).view(np.int64)), (n, c)
            else:
                assert list(a) == list(b), (n, c)
