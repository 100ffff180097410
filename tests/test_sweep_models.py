"""A sweep's model axis priced as an array: models the engine prices alike (one model_signature: dense,
no window, no MLA, MHA or GQA alike) share one block whose dimensions are arrays, every row still
evaluate() bit for bit, whatever the strategy; the others keep a block each, in the same layout."""

import numpy as np
import pytest

from costmodel import evaluate
from costmodel.analysis.sweep import _plan, sweep
from costmodel.errors import InputError
from costmodel.inputs.model import ModelStack, load_model, model_signature, stack_models
from tests.test_sweep_stacked import assert_every_row_is_evaluate

SPEC = dict(draft_model="llama-68m", acceptance_rate=0.7, gamma=4)


def test_which_models_share_a_signature():
    sig = {m: model_signature(load_model(m)) for m in ("llama-2-7b", "llama-2-13b", "llama-68m", "llama-3-8b",
                                                       "mistral-7b", "llama-2-7b-32k")}
    # MHA, gated, untied, a max_context: the Llama-2 family and the 68M draft alike
    assert sig["llama-2-7b"] == sig["llama-2-13b"] == sig["llama-68m"] == sig["llama-2-7b-32k"] is not None
    assert sig["llama-3-8b"] not in (None, sig["llama-2-7b"])      # grouped-query heads: another branch
    assert sig["mistral-7b"] is None                                # a sliding window: never stacked


def test_a_stack_holds_each_members_dimensions():
    # the derived counts of a stack are its members' own, element by element (exact integers)
    members = [load_model("llama-2-7b"), load_model("llama-2-13b")]
    s = stack_models(members, (1, 2, 1))
    assert isinstance(s, ModelStack) and s.id == "llama-2-7b,llama-2-13b" and s.shape == (1, 2, 1)
    for name in ("n_params", "kv_dim", "q_dim", "attn_params_per_layer", "dense_ffn_params", "lm_head_params"):
        got = np.asarray(getattr(s, name))
        assert got.shape == (1, 2, 1) and got.ravel().tolist() == [getattr(m, name) for m in members], name
    # 32 layers × 4096 and 40 layers × 5120, KV 2·layers·d per token in fp16
    assert s.kv_bytes_per_token(2.0).ravel().tolist() == [2.0 * 32 * 4096 * 2, 2.0 * 40 * 5120 * 2]
    assert s.n_moe_layers == 0 and s.router_params == 0 and s.n_window_layers == 0


def test_the_capacity_grids_llama_2_models_share_a_block():
    """llama-2-7b and -13b (one signature, valid on the same device counts) are one block per
    strategy; llama-68m (refused on 8 devices) and the others keep a block each. Every block priced
    over arrays has the model dimension, so that blocks still share passes."""
    axes = dict(hardware=["a100-80gb", "t4"], model=["llama-2-7b", "llama-2-13b", "mistral-7b", "llama-68m"],
                strategy=["autoregressive", "speculative"], n_devices=[1, 2, 8], batch_size=[1, 8], prompt_len=[128])
    _axes, _d, names, blocks, _invalid = _plan(SPEC, axes, "mark")
    valid = [b for b in blocks if b.invalid is None]
    assert [(b.rec.strategy, b.models) for b in valid] == [
        ("autoregressive", ("llama-2-7b", "llama-2-13b")), ("speculative", ("llama-2-7b", "llama-2-13b")),
        ("autoregressive", ("mistral-7b",)), ("speculative", ("mistral-7b",)),
        ("autoregressive", ("llama-68m",)), ("speculative", ("llama-68m",))]
    assert all("model" in b.vec and "model" not in b.index for b in valid)
    assert valid[0].members["model"] == [0, 1] and valid[2].members["model"] == [2]


def test_stacked_models_are_evaluate_bit_for_bit():
    axes = dict(hardware=["a100-80gb", "l4"], model=["llama-2-7b", "llama-2-13b", "llama-2-7b-32k"],
                strategy=["autoregressive", "speculative"], weight_dtype=["fp16", "int4"], n_devices=[1, 2],
                batch_size=[1, 32], prompt_len=[128, 1024])
    df = sweep(SPEC, workers=1, **axes)
    assert_every_row_is_evaluate(df, SPEC, axes, notes=True)


def test_each_stacked_model_keeps_its_own_max_context():
    """llama-2-7b (4,096 tokens) and llama-2-7b-32k (32,768) in one block: a 4,096-token prompt is
    marked for the first alone; refused without marking, the message is the first model's row's, as
    when that model is swept alone."""
    axes = dict(model=["llama-2-7b", "llama-2-7b-32k"], prompt_len=[512, 4096], batch_size=[1, 4])
    base = dict(hardware="a100-80gb", gen_len=64)
    _a, _d, _n, blocks, _i = _plan(base, axes, "mark")
    assert [b.models for b in blocks] == [("llama-2-7b", "llama-2-7b-32k")]
    df = sweep(base, workers=1, on_invalid="mark", **axes)
    marked = df["invalid_reason"].notna()
    assert marked.tolist() == ((df["model"] == "llama-2-7b") & (df["prompt_len"] == 4096)).tolist()
    assert np.isnan(df.loc[marked, "step_latency_s"]).all()
    assert_every_row_is_evaluate(df[~marked].drop(columns="invalid_reason").reset_index(drop=True), base, axes)
    with pytest.raises(InputError) as both:
        sweep(base, workers=1, **axes)
    with pytest.raises(InputError) as alone:
        sweep(base, workers=1, **dict(axes, model=["llama-2-7b"]))
    assert str(both.value) == str(alone.value)


def test_a_stacked_model_block_on_two_workers():
    # one block (the grid's only group) goes to the forked workers: the same rows as one process
    axes = dict(model=["llama-2-7b", "llama-2-13b"], batch_size=list(range(1, 65)), prompt_len=[128, 256, 512, 1024])
    base = dict(hardware="a100-80gb", gen_len=64)
    one = sweep(base, workers=1, chunk_rows=64, **axes)
    two = sweep(base, workers=2, chunk_rows=64, **axes)
    assert one.equals(two)
    row = one.iloc[300]
    want = evaluate(dict(base, model=row["model"], batch_size=int(row["batch_size"]), prompt_len=int(row["prompt_len"])))
    assert row["step_latency_s"] == want["step_latency_s"] and row["ttft_s"] == want["ttft_s"]


@pytest.mark.parametrize("base, axes", [
    # a tree looped over acceptance rates (stacked); an EAGLE head (it reads the target's dimensions)
    # and the target as its own draft: each model in a block of its own, with the model dimension
    (dict(hardware="a100-80gb", strategy="tree", draft_model="llama-68m", tree_nodes=8, gen_len=32),
     dict(model=["llama-2-7b", "llama-2-13b"], acceptance_rate=[0.6, 0.8], batch_size=[1, 4], prompt_len=[128, 512])),
    (dict(hardware="a100-80gb", strategy="speculative", draft_model="eagle", acceptance_rate=0.7, gamma=3, gen_len=32),
     dict(model=["llama-2-7b", "llama-2-13b"], batch_size=[1, 4], prompt_len=[128, 512])),
    (dict(strategy="speculative", draft_model="self", draft_kv_budget=256, acceptance_rate=0.7, gamma=3, gen_len=32),
     dict(hardware=["a100-80gb", "h100-sxm"], model=["llama-2-7b", "llama-2-13b"], batch_size=[1, 4], prompt_len=[128])),
    # one model twice (a stack of two equal members) beside another, dtypes and device counts stacked too
    (dict(hardware="a100-80gb", gen_len=32),
     dict(model=["llama-2-7b", "llama-2-7b", "llama-2-13b"], weight_dtype=["fp16", "int8"], n_devices=[1, 2],
          batch_size=[1, 4], prompt_len=[128])),
], ids=["tree-looped", "eagle", "self-draft", "repeated-model"])
def test_models_apart_or_stacked_are_evaluate_bit_for_bit(base, axes):
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes, notes=True)


def test_a_mix_of_zoo_models():
    """Five grouped-query models of one signature in one block (autoregressive; speculative with the
    68M draft is refused for their vocabularies); tied embeddings (llama-3.2-1b), a mixture of
    experts (mixtral-8x7b), sliding windows (gemma-2-9b) and an MHA model (tinyllama) apart; every
    valid row evaluate() bit for bit, notes included."""
    base = dict(SPEC, gen_len=64)
    axes = dict(hardware=["h100-sxm", "l40s"], model=["llama-3-8b", "llama-3.1-8b", "llama-3-70b", "qwen2.5-7b",
                                                      "qwen3-8b", "llama-3.2-1b", "tinyllama-1.1b", "mixtral-8x7b",
                                                      "gemma-2-9b"],
                strategy=["autoregressive", "speculative"], n_devices=[1, 2, 4], batch_size=[1, 16], prompt_len=[256, 2048])
    _a, _d, _n, blocks, _i = _plan(base, axes, "mark")
    assert [(b.rec.strategy, b.models) for b in blocks if b.invalid is None][:2] == [
        ("autoregressive", ("llama-3-8b", "llama-3.1-8b", "llama-3-70b", "qwen2.5-7b", "qwen3-8b")),
        ("autoregressive", ("llama-3.2-1b",))]
    df = sweep(base, workers=1, on_invalid="mark", **axes)
    ok = df[df["invalid_reason"].isna()].drop(columns="invalid_reason").reset_index(drop=True)
    assert len(ok) == 240
    assert_every_row_is_evaluate(ok, base, axes, notes=True)


@pytest.mark.parametrize("base, axes", [
    # token trees looped over acceptance rates (one stacked block per rate), devices and counts stacked
    (dict(strategy="tree", draft_model="llama-68m", tree_nodes=16, gen_len=32),
     dict(hardware=["a100-80gb", "l4"], model=["llama-2-7b", "llama-2-13b", "vicuna-7b"], acceptance_rate=[0.6, 0.8],
          n_devices=[1, 2], batch_size=[1, 4], prompt_len=[128, 512])),
    (dict(hardware="a100-80gb", strategy="tree", draft_model="llama-68m", tree_width=2, tree_depth=3,
          acceptance_rate=0.7, gen_len=32),
     dict(model=["llama-2-7b", "llama-2-13b"], weight_dtype=["fp16", "int4"], batch_size=[1, 4], prompt_len=[128, 512])),
    # shared prefixes: an MHA stack and a GQA stack
    (dict(strategy="shared_prefix", n_branches=4, gen_len=32),
     dict(hardware=["a100-80gb", "h100-sxm"], model=["llama-2-7b", "llama-2-13b", "llama-3-8b", "llama-3.1-8b"],
          shared_prefix_len=[0, 64], batch_size=[1, 4], prompt_len=[128, 512])),
], ids=["tree-looped", "tree-dtypes", "shared-prefix"])
def test_trees_and_shared_prefixes_over_stacked_models(base, axes):
    _a, _d, _n, blocks, _i = _plan(base, axes, "error")
    assert all(len(b.models) >= 2 for b in blocks)
    df = sweep(base, workers=1, **axes)
    assert_every_row_is_evaluate(df, base, axes, notes=True)
