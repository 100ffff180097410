"""A ``weight_dtype`` axis priced as an array (dtypes.WeightDtypes) and a tree's draft passes priced
as one array evaluation: every row still equals evaluate() bit for bit (notes included), and the
grid becomes fewer blocks."""

import dataclasses

import numpy as np
import pytest

from costmodel.analysis.sweep import sweep
from costmodel.analysis.sweep_grid import group_blocks, plan_axes
from costmodel.engine.evaluate import build_exec
from costmodel.inputs import dtypes
from costmodel.inputs.record import parse_record
from tests.test_sweep_stacked import assert_every_row_is_evaluate

SPEC = dict(draft_model="llama-68m", acceptance_rate=0.7, gamma=4)


def test_dtypes_of_one_signature_share_a_block():
    """fp16, int8 and int4 all compute in fp16 with fp16 KV and 2-byte activations: one block; bf16
    computes in bf16 (a block of its own); fp8's compute dtype depends on the device (never stacked);
    a stacked run is contiguous in the axis (int4 after bf16 starts a new run)."""
    base = dict(SPEC, model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=128)
    axes = plan_axes(base, dict(weight_dtype=["fp16", "int8", "int4", "bf16", "fp8", "int4"], batch_size=[1, 2]))
    blocks = group_blocks(base, axes)
    assert [b.members.get("weight_dtype") for b in blocks] == [[0, 1, 2], None, None, None]
    assert blocks[0].dtypes == ("fp16", "int8", "int4") and blocks[0].vec == ["weight_dtype", "batch_size"]
    assert [b.index.get("weight_dtype") for b in blocks] == [None, 3, 4, 5]
    assert [dtypes.stack_signature(d) for d in ("fp16", "int4", "bf16", "fp8", "nvfp4")] == \
        [("fp16", "fp16", 2.0)] * 2 + [("bf16", "bf16", 2.0), None, None]


def test_a_stacked_exec_reads_each_member():
    """Bytes per weight on the eager runtime: fp16 2; int8 1 + 0 scale bytes (per channel) = 1;
    int4 0.5 + 4 bytes per group of 128 = 0.53125. Dequantisation FLOPs per weight: 0, 4, 8
    (runtimes/eager.yaml). Activations 2 bytes for all three: one number."""
    rec = parse_record(dict(model="llama-2-7b", hardware="a100-80gb", runtime="eager", batch_size=1, prompt_len=1))
    ex = dataclasses.replace(build_exec(rec), weight_dtype=dtypes.WeightDtypes(("fp16", "int8", "int4"), (3, 1)))
    assert ex.w_bytes.tolist() == [[2.0], [1.0], [0.53125]]
    assert ex.dequant_flops_per_weight.tolist() == [[0.0], [4.0], [8.0]]
    assert ex.act_bytes == 2.0 and ex.compute_dtype == "fp16"
    with pytest.raises(TypeError, match="differ in a decision"):
        ex.quantised                      # fp16 is not, int8 is: a branch the engine must not take for all


@pytest.mark.parametrize("model,axes", [
    ("llama-2-7b", dict(weight_dtype=["int4", "fp16", "int8"], hardware=["a100-80gb", "t4"], n_devices=[1, 2, 4],
                        strategy=["autoregressive", "speculative"], batch_size=[1, 64], prompt_len=[128, 3968])),
    # a dtype axis inside the numeric ones, MoE weights (routed experts per member), tied embeddings
    ("mixtral-8x7b", dict(batch_size=[1, 16], weight_dtype=["fp16", "int8", "int4"], n_devices=[2, 4],
                          prompt_len=[512])),
    ("llama-3.2-1b", dict(weight_dtype=["int8", "int4"], runtime=["eager", "vllm"], batch_size=[1, 32],
                          prompt_len=[100, 5000])),
], ids=["dense", "moe", "tied-runtimes"])
def test_stacked_dtype_rows_are_bit_identical(model, axes):
    base = dict(SPEC, model=model) if "strategy" in axes else dict(model=model, hardware="h100-sxm")
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes, notes=True)


@pytest.mark.parametrize("extra", [dict(), dict(draft_model="self", tree_nodes=16), dict(draft_kv_budget=512),
                                   dict(n_devices=2, tree_depth=2)], ids=["model", "self", "kv-budget", "tp"])
def test_tree_draft_passes_in_one_evaluation_are_bit_identical(extra):
    base = {**dict(model="llama-2-7b", hardware="a100-80gb", strategy="tree", draft_model="llama-68m",
                   acceptance_rate=0.7, tree_nodes=32, tree_depth=5), **extra}
    axes = dict(batch_size=[1, 7, 64], prompt_len=[16, 1000, 3900])
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes, notes=True)
    assert np.all(df["draft_time_per_step_s"] > 0)
