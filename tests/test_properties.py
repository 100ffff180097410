"""Property suite: physics the model must respect for every zoo model, every zoo device and random records.

Examples per test come from the hypothesis profile in conftest.py (deadline=None); set
COSTMODEL_HYPOTHESIS_EXAMPLES=N to search harder locally. (``sweep`` equals ``evaluate`` row by row:
tests/test_sweep.py.)
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from hypothesis import assume, given, settings, strategies as st

from costmodel import evaluate, load_hardware, load_model
from costmodel.engine.evaluate import OUTPUT_KEYS
from costmodel.inputs.record import parse_record
from costmodel.inputs.rules import DEFAULT_MEDUSA_HEADS
from costmodel.engine.roofline import BOUNDS
from costmodel.inputs.specs import zoo_ids
from costmodel.engine.tree import Tree

HARDWARE = zoo_ids("hardware_specs")
MODELS = zoo_ids("model_specs")
RUNTIMES = zoo_ids("runtimes")
DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
SMALL_DRAFTS = ("llama-68m", "vicuna-68m", "tinyllama-1.1b", "sheared-llama-1.3b")
STRATEGIES = ("autoregressive", "speculative", "tree", "shared_prefix")

_N = int(os.environ.get("COSTMODEL_HYPOTHESIS_EXAMPLES", "0"))
deep = settings(max_examples=_N) if _N else (lambda f: f)


# --------------------------------------------------------------------------- records

@st.composite
def parent_lists(draw, max_nodes=20):
    n = draw(st.integers(1, max_nodes))
    return [draw(st.integers(0, i - 1)) for i in range(1, n + 1)]


@st.composite
def rank_vectors(draw):
    k = draw(st.integers(1, 5))
    raw = draw(st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k))
    total = draw(st.floats(0.0, 0.99))
    s = sum(raw)
    return [0.0] * k if s == 0 else [x / s * total for x in raw]


@st.composite
def records(draw, strategies=STRATEGIES, tree_shapes=("full", "nodes", "parents", "hardware")):
    """A valid record over the whole zoo. Every configuration is accepted (it may not fit)."""
    model = draw(st.sampled_from(MODELS))
    m = load_model(model)
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if m.n_heads % d == 0]))
    pp = draw(st.sampled_from([d for d in (1, 1, 2) if m.n_layers % d == 0]))
    prompt = draw(st.integers(1, min(32768, m.max_context - 1)))      # within the model's max_context
    rec = dict(model=model, hardware=draw(st.sampled_from(HARDWARE)), runtime=draw(st.sampled_from(RUNTIMES)),
               batch_size=draw(st.integers(1, 256)), prompt_len=prompt,
               gen_len=draw(st.integers(1, min(4096, m.max_context - prompt))), n_devices=tp * pp,
               tensor_parallel=tp, pipeline_parallel=pp, weight_dtype=draw(st.sampled_from(DTYPES)))
    if m.n_moe_layers and draw(st.booleans()):
        # expert parallel over every device of a stage; attention tp-way, data-parallel over the rest
        ep = draw(st.sampled_from([d for d in (2, 4, 8) if m.n_experts % d == 0]))
        tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if ep % d == 0 and m.n_heads % d == 0]))
        rec.update(n_devices=ep * pp, tensor_parallel=tp, expert_parallel=ep)
    drafts = tuple(d for d in SMALL_DRAFTS if load_model(d).vocab_size == m.vocab_size)   # same tokenizer
    if m.mtp_layers and "speculative" in strategies:
        drafts += ("mtp",)
    if draw(st.booleans()):
        rec["kv_dtype"] = draw(st.sampled_from(KV_DTYPES))
    s = rec["strategy"] = draw(st.sampled_from(strategies))
    if s == "speculative":
        rec["draft_model"] = draw(st.sampled_from(("none", "self") + drafts))
        g = rec["gamma"] = draw(st.integers(1, 8))
        if draw(st.booleans()):
            rec["acceptance_rate"] = draw(st.floats(0.0, 0.99))
        else:
            rec["mean_accepted_tokens"] = draw(st.floats(1.0, g + 1.0))
        rec["batch_sync"] = draw(st.sampled_from(("ragged", "lockstep")))
        rec["draft_placement"] = "same_device" if rec["draft_model"] == "mtp" else \
            draw(st.sampled_from(("same_device", "separate_device", "separate_node")))
        rec["draft_schedule"] = draw(st.sampled_from(("serial", "overlap")))
        if draw(st.booleans()):
            rec["draft_kv_budget"] = draw(st.integers(16, 4096))
    elif s == "tree":
        rec["draft_model"] = draw(st.sampled_from(("none", "medusa", "eagle", "self")
                                                  + tuple(d for d in drafts if d != "mtp")))
        rec["attention_kernel"] = draw(st.sampled_from(("prefix_aware", "per_branch", "dense_masked")))
        rec["batch_sync"] = draw(st.sampled_from(("ragged", "lockstep")))
        shape = draw(st.sampled_from(tree_shapes))
        depth = None
        if shape == "full":
            rec["tree_width"] = draw(st.integers(1, 4))
            depth = rec["tree_depth"] = draw(st.integers(1, 4))
        elif shape == "parents":
            rec["tree_parents"] = draw(parent_lists())
            depth = Tree(tuple(rec["tree_parents"])).depth
            if rec["draft_model"] == "medusa":
                rec["medusa_heads"] = max(5, depth)      # a checkpoint with a head per level
        else:
            rec["tree_nodes"] = draw(st.integers(1, 12 if shape == "hardware" else 48))
            if draw(st.booleans()):
                rec["tree_depth"] = draw(st.integers(1, 8))
                depth = min(rec["tree_depth"], rec["tree_nodes"])
                if rec["draft_model"] == "medusa":       # an optimal tree is one level per head at most
                    depth = min(depth, DEFAULT_MEDUSA_HEADS)
            if shape == "hardware":
                rec["tree_shape"] = "optimal_for_hardware"
        tau_ok = depth and shape != "hardware"
        acc = draw(st.sampled_from(("alpha", "ranks", "tau") if tau_ok else ("alpha", "ranks")))
        if acc == "alpha":
            rec["acceptance_rate"] = draw(st.floats(0.0, 0.99))
        elif acc == "ranks":
            rec["rank_acceptance"] = draw(rank_vectors())
        else:
            rec["mean_accepted_tokens"] = draw(st.floats(1.0, depth + 1.0))
        if rec["draft_model"] in SMALL_DRAFTS + ("self",) and draw(st.booleans()):
            rec["draft_kv_budget"] = draw(st.integers(16, 4096))
    elif s == "shared_prefix":
        rec["n_branches"] = draw(st.integers(1, 16))
        rec["shared_prefix_len"] = draw(st.integers(0, rec["prompt_len"]))
        rec["attention_kernel"] = draw(st.sampled_from(("prefix_aware", "per_branch", "dense_masked")))
    return rec


def numeric(out: dict) -> dict:
    return {k: v for k, v in out.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def le(a, b, rel=1e-9):
    """a <= b up to rounding."""
    return a <= b + rel * abs(b) + 1e-300


TIME_KEYS = ("step_latency_s", "time_per_output_token_s", "ttft_s", "e2e_latency_s")


def time_keys(rec):
    # a hardware-optimised tree may pick a bigger, slower-per-step tree that makes more tokens per second:
    # only its per-token time is monotone
    if rec.get("tree_shape") == "optimal_for_hardware":
        return ("time_per_output_token_s", "ttft_s")
    return TIME_KEYS


# --------------------------------------------------------------------------- properties

@deep
@given(records())
def test_outputs_finite_and_non_negative(rec):
    out = evaluate(rec)
    assert set(OUTPUT_KEYS) <= set(out)
    assert isinstance(out["fits"], bool)
    assert out["bound"] in BOUNDS
    for k, v in numeric(out).items():
        assert math.isfinite(v), (k, v)
        assert v >= 0, (k, v)
    assert out["step_latency_s"] > 0 and out["tokens_per_step"] >= 1


@deep
@given(records(), st.sampled_from(("bandwidth", "l2", "flops")), st.floats(1.0, 10.0))
def test_more_bandwidth_or_flops_never_slower(rec, what, k):
    r = parse_record(rec)
    hw = load_hardware(r.hardware, r.power_mode)
    if what == "bandwidth":
        faster = dataclasses.replace(hw, bandwidth_bytes_per_s=hw.bandwidth_bytes_per_s * k)
    elif what == "l2":
        faster = dataclasses.replace(hw, l2_bandwidth_bytes_per_s=hw.l2_bandwidth_bytes_per_s * k)
    else:
        faster = dataclasses.replace(hw, vector_flops_per_s=hw.vector_flops_per_s * k,
                                     matrix_flops_per_s={d: (v * k if v else v)
                                                         for d, v in hw.matrix_flops_per_s.items()})
    base = evaluate(r.replace(hardware=hw, power_mode=None))
    fast = evaluate(r.replace(hardware=faster, power_mode=None))
    for key in time_keys(rec):
        assert le(fast[key], base[key]), (key, fast[key], base[key])
    assert le(base["tokens_per_s"], fast["tokens_per_s"])


@deep
@given(records(), st.sampled_from(("prompt_len", "gen_len")), st.integers(1, 8192))
def test_longer_context_never_faster(rec, axis, extra):
    longer = dict(rec, **{axis: rec[axis] + extra})
    assume(longer["prompt_len"] + longer["gen_len"] <= load_model(rec["model"]).max_context)
    a, b = evaluate(rec), evaluate(longer)
    keys = time_keys(rec)
    if axis == "gen_len":      # the prompt is the same: prefill does not change
        keys = tuple(k for k in keys if k != "ttft_s")
    for key in keys:
        assert le(a[key], b[key]), (key, a[key], b[key])
    assert le(a["kv_cache_bytes"], b["kv_cache_bytes"])
    assert le(a["peak_device_memory_bytes"], b["peak_device_memory_bytes"])


@deep
@given(records(tree_shapes=("full", "nodes", "parents")), st.integers(1, 256))
def test_larger_batch_never_less_memory_and_same_weights(rec, extra):
    # (not tree_shape=optimal_for_hardware: a bigger batch may pick a shallower tree, hence fewer
    # Medusa heads and less memory)
    bigger = dict(rec, batch_size=rec["batch_size"] + extra)
    a, b = evaluate(rec), evaluate(bigger)
    assert le(a["peak_device_memory_bytes"], b["peak_device_memory_bytes"])
    assert le(a["kv_cache_bytes"], b["kv_cache_bytes"])
    assert a["weights_bytes"] == b["weights_bytes"]
    assert a["memory_target_weights_bytes"] == b["memory_target_weights_bytes"]
    if not b["fits"]:
        assert b["peak_device_memory_bytes"] > b["usable_memory_bytes"]


@deep
@given(records(strategies=("speculative", "tree")))
def test_tokens_per_step_within_bounds_and_speedup_below_it(rec):
    out = evaluate(rec)
    tps = out["tokens_per_step"]
    top = rec.get("gamma", 4) + 1 if rec["strategy"] == "speculative" else out["tree_depth"] + 1
    assert 1.0 - 1e-9 <= tps <= top + 1e-9, (tps, top)
    assert le(out["speedup_vs_ar"], tps), (out["speedup_vs_ar"], tps)


@deep
@given(records(strategies=("speculative",)), st.floats(0.0, 0.99), st.floats(0.0, 0.99))
def test_chain_tokens_per_step_monotone_in_acceptance(rec, a1, a2):
    lo, hi = sorted((a1, a2))
    rec = {k: v for k, v in rec.items() if k != "mean_accepted_tokens"}
    t_lo = evaluate(dict(rec, acceptance_rate=lo))["tokens_per_step"]
    t_hi = evaluate(dict(rec, acceptance_rate=hi))["tokens_per_step"]
    assert le(t_lo, t_hi), (lo, t_lo, hi, t_hi)


@deep
@given(records(strategies=("tree",), tree_shapes=("full", "parents")), rank_vectors(), st.floats(0.0, 1.0))
def test_tree_tokens_per_step_monotone_in_rank_acceptance(rec, ranks, shrink):
    """For a fixed tree, lowering every rank's acceptance never raises τ."""
    rec = {k: v for k, v in rec.items() if k not in ("acceptance_rate", "mean_accepted_tokens")}
    hi = evaluate(dict(rec, rank_acceptance=ranks))["tokens_per_step"]
    lo = evaluate(dict(rec, rank_acceptance=[p * shrink for p in ranks]))["tokens_per_step"]
    assert le(lo, hi), (lo, hi)


@deep
@given(records(strategies=("tree",), tree_shapes=("full", "nodes")), st.floats(0.0, 0.99), st.floats(0.0, 0.99))
def test_tree_tokens_per_step_monotone_in_alpha(rec, a1, a2):
    """Full trees (any batch_sync) and Sequoia-optimal trees for a node budget (ragged batches).

    Not asserted, on purpose: an explicit tree_parents tree under the default rank model
    p_i = α(1 − α)^(i−1) (a branch hanging off a rank-2 child is used less as α → 1), and a
    lock-step batch on an optimal tree (the DP maximises the ragged τ, not the lock-step one)."""
    if "tree_nodes" in rec:
        rec = dict(rec, batch_sync="ragged")
    lo, hi = sorted((a1, a2))
    rec = {k: v for k, v in rec.items() if k not in ("rank_acceptance", "mean_accepted_tokens")}
    t_lo = evaluate(dict(rec, acceptance_rate=lo))["tokens_per_step"]
    t_hi = evaluate(dict(rec, acceptance_rate=hi))["tokens_per_step"]
    assert le(t_lo, t_hi, 1e-9), (lo, t_lo, hi, t_hi)


@deep
@given(st.sampled_from(MODELS), st.sampled_from(HARDWARE), st.sampled_from(DTYPES), st.data())
def test_tensor_parallel_never_increases_per_device_weights(model, hw, dtype, data):
    m = load_model(model)
    tps = [d for d in (1, 2, 4, 8, 16) if m.n_heads % d == 0]
    t1 = data.draw(st.sampled_from(tps))
    t2 = data.draw(st.sampled_from([t for t in tps if t >= t1]))
    base = dict(model=model, hardware=hw, batch_size=data.draw(st.integers(1, 64)),
                prompt_len=data.draw(st.integers(1, min(8192, m.max_context - 128))), weight_dtype=dtype)
    a = evaluate(dict(base, n_devices=t1))
    b = evaluate(dict(base, n_devices=t2))
    assert le(b["memory_target_weights_bytes"], a["memory_target_weights_bytes"])
    assert a["weights_bytes"] == b["weights_bytes"]       # the total over devices is the model


@deep
@given(records())
def test_evaluate_is_deterministic(rec):
    a = evaluate(dict(rec))
    b = evaluate(dict(rec))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), k


def test_every_zoo_pair_gives_finite_results():
    """The whole zoo, not a sample: every model on every device (autoregressive, batch 1 and 64)."""
    for hw in HARDWARE:
        for model in MODELS:
            for b in (1, 64):
                out = evaluate(dict(model=model, hardware=hw, batch_size=b, prompt_len=1024))
                for k, v in numeric(out).items():
                    assert math.isfinite(v) and v >= 0, (hw, model, k, v)


@given(st.sampled_from([i for i in MODELS if load_model(i).n_window_layers]), st.sampled_from(HARDWARE),
       st.integers(1, 64), st.integers(0, 1024), st.integers(1, 1024), st.sampled_from((1, 2)))
def test_windowed_layers_stop_growing(model, hw, batch, past, extra, tp):
    """Past the window, a longer prompt adds KV only on global layers (windowed layers hold their window):
    growth = B · extra · per-layer bytes · global layers · tp (every device of the group)."""
    from costmodel.engine.evaluate import build_exec
    m = load_model(model)
    rec = dict(model=model, hardware=hw, batch_size=batch, prompt_len=m.attention_window + past, gen_len=64,
               n_devices=tp)
    longer = dict(rec, prompt_len=rec["prompt_len"] + extra)
    a, b = evaluate(rec), evaluate(longer)
    ex = build_exec(parse_record(rec))
    growth = batch * extra * ex.kv_bytes_per_token_layer * m.n_global_layers * tp
    assert b["kv_cache_bytes"] - a["kv_cache_bytes"] == pytest.approx(growth, rel=1e-9)


# --------------------------------------------------------------------------- expert parallel, MTP

MOE_MODELS = [i for i in MODELS if load_model(i).n_moe_layers]
MTP_MODELS = [i for i in MODELS if load_model(i).mtp_layers]


@deep
@given(st.sampled_from(MOE_MODELS), st.sampled_from(HARDWARE), st.sampled_from(("bf16", "fp8", "int4")), st.data())
def test_expert_parallel_moves_experts_not_work(model, hw, dtype, data):
    """Splitting the routed experts by expert (EP) instead of within each expert (TP) over the same
    devices: the same model in all, the same weights per device, the same routed-expert FLOPs; with
    attention data parallel (tp < ep) a device keeps at most the KV that TP attention keeps."""
    m = load_model(model)
    ep = data.draw(st.sampled_from([d for d in (2, 4, 8) if m.n_experts % d == 0 and m.n_heads % d == 0]))
    base = dict(model=model, hardware=hw, weight_dtype=dtype, n_devices=ep, batch_size=data.draw(st.integers(1, 128)),
                prompt_len=data.draw(st.integers(1, 4096)), gen_len=64)
    tp_only = evaluate(base, details=True)
    with_ep = evaluate(dict(base, expert_parallel=ep), details=True)
    dp_att = evaluate(dict(base, expert_parallel=ep, tensor_parallel=1), details=True)
    assert tp_only["weights_bytes"] == with_ep["weights_bytes"] == dp_att["weights_bytes"]
    assert with_ep["memory_target_weights_bytes"] == pytest.approx(tp_only["memory_target_weights_bytes"], rel=1e-9)
    assert le(tp_only["memory_target_weights_bytes"], dp_att["memory_target_weights_bytes"])
    flops = [{o["name"]: o["flops"] for o in r["operators"]}["moe_ffn"] for r in (tp_only, with_ep, dp_att)]
    assert flops[1] == pytest.approx(flops[0], rel=1e-9) and flops[2] == pytest.approx(flops[0], rel=1e-9)
    assert le(dp_att["memory_target_kv_bytes"], tp_only["memory_target_kv_bytes"])
    ops = {o["name"] for o in dp_att["operators"]}
    assert {"moe_dispatch", "moe_combine"} <= ops and not {"moe_dispatch", "moe_combine"} & \
        {o["name"] for o in with_ep["operators"]}


@deep
@given(st.sampled_from(MTP_MODELS), st.sampled_from(HARDWARE), st.integers(1, 7), st.floats(0.0, 0.99), st.data())
def test_mtp_draft_passes_are_cheaper_than_target_steps(model, hw, gamma, alpha, data):
    """An MTP pass (one layer + the shared head) never costs more than the target's own decode step;
    the draft time grows with γ; τ stays within [1, γ + 1] and the speedup below τ."""
    base = dict(model=model, hardware=hw, n_devices=8, weight_dtype=data.draw(st.sampled_from(("bf16", "fp8"))),
                batch_size=data.draw(st.integers(1, 64)), prompt_len=data.draw(st.integers(1, 8192)), gen_len=64,
                strategy="speculative", draft_model="mtp", acceptance_rate=alpha)
    if data.draw(st.booleans()):
        base.update(expert_parallel=8, tensor_parallel=data.draw(st.sampled_from((1, 8))))
    a = evaluate(dict(base, gamma=gamma))
    b = evaluate(dict(base, gamma=gamma + 1))
    assert le(a["draft_time_per_step_s"] / gamma, a["ar_step_latency_s"])
    assert le(a["draft_time_per_step_s"], b["draft_time_per_step_s"])
    assert 1.0 - 1e-9 <= a["tokens_per_step"] <= gamma + 1 + 1e-9
    assert le(a["speedup_vs_ar"], a["tokens_per_step"])
    assert a["memory_draft_weights_bytes"] > 0 and a["memory_draft_kv_bytes"] > 0
