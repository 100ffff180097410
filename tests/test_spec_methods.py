"""Speculative methods as serving stacks run them: EAGLE-3 heads, EAGLE chains, suffix drafting,
sharded draft models (draft_tensor_parallel) and acceptance by position. Expected values are worked
out by hand in each test."""

import pytest

from costmodel import InputError, evaluate
from costmodel.engine.evaluate import evaluate_passes
from costmodel.engine.strategies.heads import eagle3_params

L8 = dict(model="llama-3.1-8b", hardware="h100-sxm", batch_size=1, prompt_len=128, gen_len=256, runtime="vllm",
          strategy="speculative")


def _op_flops(cost, name):
    return sum(float(f) for n, f, _h, _t, _b in cost.ops if n == name)


# ----------------------------------------------------------------------------- acceptance by position

def test_acceptance_by_position_gives_the_product_sum():
    # τ = 1 + α1 + α1·α2 + α1·α2·α3 = 1 + 0.8 + 0.56 + 0.336 = 2.696
    r = evaluate(dict(L8, draft_model="eagle3", gamma=3, acceptance_by_position="0.8,0.7,0.6"))
    assert r["tokens_per_step"] == pytest.approx(2.696)
    # only the first γ positions count: γ = 2 → 1 + 0.8 + 0.56 = 2.36
    r = evaluate(dict(L8, draft_model="eagle3", gamma=2, acceptance_by_position="0.8,0.7,0.6"))
    assert r["tokens_per_step"] == pytest.approx(2.36)


def test_acceptance_by_position_lockstep_and_iid_limit():
    # lock-step batch of 2: Σ_j (Π_{i≤j} α_i)^2 = 1 + 0.64 + 0.3136 + 0.112896 = 2.066496
    r = evaluate(dict(L8, draft_model="eagle3", gamma=3, acceptance_by_position="0.8,0.7,0.6", batch_size=2,
                      batch_sync="lockstep"))
    assert r["tokens_per_step"] == pytest.approx(2.066496)
    # equal positions are Leviathan's chain: (1 − 0.7^4)/(1 − 0.7) = 0.7599/0.3 = 2.533
    r = evaluate(dict(L8, draft_model="eagle3", gamma=3, acceptance_by_position="0.7,0.7,0.7"))
    assert r["tokens_per_step"] == pytest.approx(2.533)


@pytest.mark.parametrize("extra, field", [
    (dict(gamma=4, acceptance_by_position="0.8,0.7,0.6"), "acceptance_by_position"),      # fewer than γ
    (dict(gamma=3, acceptance_by_position="0.8,0.7,0.6", acceptance_rate=0.7), "acceptance_rate"),
    (dict(gamma=3, acceptance_by_position="0.8,0.7,0.6", mean_accepted_tokens=3.5), "mean_accepted_tokens"),
    (dict(gamma=3, acceptance_by_position="0.8,1.2,0.6"), "acceptance_by_position"),       # not a probability
])
def test_acceptance_by_position_input_errors(extra, field):
    with pytest.raises(InputError) as e:
        evaluate(dict(L8, draft_model="eagle3", **extra))
    assert e.value.field == field


def test_acceptance_by_position_is_for_chains():
    with pytest.raises(InputError) as e:
        evaluate(dict(L8, strategy="tree", draft_model="eagle", tree_width=1, tree_depth=3,
                      acceptance_by_position="0.8,0.7,0.6"))
    assert e.value.field == "acceptance_by_position"


# ----------------------------------------------------------------------------- EAGLE-3 head

def test_eagle3_head_weights_llama_3_1_8b():
    # d = 4096, q = 32·128 = 4096, kv = 8·128 = 1024, d_ff = 14336, V_d = 32000
    # attention 4096·(4096 + 2048) + 4096·4096         =  41,943,040
    # embedding half of q/k/v: 4096·6144                 =  25,165,824
    # FFN 3·4096·14336                                   = 176,160,768
    # fc 3·4096²                                         =  50,331,648
    # LM head 32000·4096                                 = 131,072,000
    # norms 4·4096                                       =      16,384
    total = 41_943_040 + 25_165_824 + 176_160_768 + 50_331_648 + 131_072_000 + 16_384
    assert total == 424_689_664
    from costmodel.inputs.model import load_model
    assert eagle3_params(load_model("llama-3.1-8b")) == total
    r = evaluate(dict(L8, draft_model="eagle3", gamma=3, mean_accepted_tokens=2.79))
    assert r["memory_draft_weights_bytes"] == pytest.approx(2 * total)          # bf16, one device


def test_eagle3_chain_passes_reduced_vocab_and_fc_once():
    B = 2
    p = evaluate_passes(dict(L8, batch_size=B, draft_model="eagle3", gamma=3, mean_accepted_tokens=2.79))
    d = p["draft"].cost
    # three draft passes, each with an LM head over V_d = 32000: 3 · 2·4096·32000·B
    assert _op_flops(d, "lm_head") == pytest.approx(3 * 2 * 4096 * 32000 * B)
    # the fc fuses three layers' features once per step: 2·(3·4096)·4096·B
    assert _op_flops(d, "eagle3_fc") == pytest.approx(2 * 3 * 4096 * 4096 * B)
    # the target's verification keeps the full vocabulary: 2·4096·128256·B·(γ+1)
    assert _op_flops(p["verify"].cost, "lm_head") == pytest.approx(2 * 4096 * 128256 * B * 4)
    # a given draft vocabulary replaces the default
    p = evaluate_passes(dict(L8, draft_model="eagle3", gamma=1, mean_accepted_tokens=1.7, draft_vocab_size=64000))
    assert _op_flops(p["draft"].cost, "lm_head") == pytest.approx(2 * 4096 * 64000)


def test_eagle_chain_draft_time_is_linear_in_gamma():
    def draft(kind, g):
        return evaluate(dict(L8, draft_model=kind, gamma=g, mean_accepted_tokens=1.5))["draft_time_per_step_s"]
    # EAGLE-1: γ identical one-token head passes
    assert draft("eagle", 4) == pytest.approx(4 * draft("eagle", 1))
    # EAGLE-3: the first pass also runs the fc, the later ones do not: D(γ) = first + (γ − 1)·rest
    rest = draft("eagle3", 3) - draft("eagle3", 2)
    assert draft("eagle3", 2) - draft("eagle3", 1) == pytest.approx(rest)
    assert draft("eagle3", 1) > rest


def test_eagle3_tree_and_vocab_field_rules():
    r = evaluate(dict(L8, strategy="tree", draft_model="eagle3", tree_width=2, tree_depth=3, acceptance_rate=0.7))
    assert r["draft_time_per_step_s"] > 0
    with pytest.raises(InputError) as e:
        evaluate(dict(L8, draft_model="eagle", gamma=2, acceptance_rate=0.7, draft_vocab_size=32000))
    assert e.value.field == "draft_vocab_size"
    with pytest.raises(InputError) as e:
        evaluate(dict(L8, draft_model="medusa", gamma=2, acceptance_rate=0.7))
    assert e.value.field == "draft_model"


# ----------------------------------------------------------------------------- suffix decoding

def test_suffix_drafts_on_the_cpu_like_none():
    s = evaluate(dict(L8, draft_model="suffix", gamma=5, acceptance_rate=0.6))
    n = evaluate(dict(L8, draft_model="none", gamma=5, acceptance_rate=0.6))
    assert s["draft_time_per_step_s"] == 0.0
    assert s["memory_draft_weights_bytes"] == 0.0
    # τ from α and γ_max: (1 − 0.6^6)/(1 − 0.6) = (1 − 0.046656)/0.4 = 2.38336
    assert s["tokens_per_step"] == pytest.approx(2.38336)
    # verification carries γ_max + 1 tokens, as prompt lookup's does
    assert s["step_latency_s"] == n["step_latency_s"]
    assert any("suffix" in note for note in s["notes"])


# ----------------------------------------------------------------------------- draft_tensor_parallel

T70 = dict(model="llama-3-70b", hardware="h100-sxm", batch_size=32, prompt_len=512, n_devices=8,
           strategy="speculative", draft_model="llama-3-8b", acceptance_rate=0.8, gamma=4)


def test_draft_tensor_parallel_splits_weights_and_adds_allreduces():
    one = evaluate(dict(T70))
    two = evaluate(dict(T70, draft_tensor_parallel=2))
    # llama-3-8b has 8 KV heads: TP 2 replicates nothing, so each device holds exactly half
    assert two["memory_draft_weights_bytes"] == pytest.approx(one["memory_draft_weights_bytes"] / 2)
    assert two["weights_bytes"] == pytest.approx(one["weights_bytes"])         # the total is unchanged
    p = evaluate_passes(dict(T70, draft_tensor_parallel=2))
    # the draft's passes now carry its own all-reduces (two per layer) on a TP-2 group
    rows = [r for r in p["draft"].cost.ops if r[0] == "allreduce"]
    assert rows and p["draft"].ex.tp == 2
    assert not [r for r in evaluate_passes(dict(T70))["draft"].cost.ops if r[0] == "allreduce"]
    assert two["draft_time_per_step_s"] < one["draft_time_per_step_s"]


def test_draft_tensor_parallel_rules():
    with pytest.raises(InputError) as e:                    # 32 heads: 3 does not divide them
        evaluate(dict(T70, draft_tensor_parallel=3))
    assert e.value.field == "draft_tensor_parallel"
    with pytest.raises(InputError) as e:                    # more devices than the target's 8
        evaluate(dict(T70, draft_tensor_parallel=16))
    assert e.value.field == "draft_tensor_parallel"
    with pytest.raises(InputError) as e:                    # a head runs on the target's group
        evaluate(dict(T70, draft_model="eagle3", draft_tensor_parallel=2))
    assert e.value.field == "draft_tensor_parallel"
    r = evaluate(dict(T70, draft_tensor_parallel=2, draft_placement="separate_device"))
    assert r["n_devices_total"] == 8 + 2


# ----------------------------------------------------------------------------- γ and draft TP in plan / recommend

PLAN70 = dict(model="llama-3-70b", hardware="h100-sxm", batch_size=32, prompt_len=512, strategy="speculative",
              draft_model="llama-3-8b", acceptance_rate=0.8)


def test_plan_names_a_one_device_draft_as_the_binding_constraint():
    # γ = 4 passes of the 8B draft on one device read its 16.1 GB each: ≥ 4 × 16.1e9 / 3.35e12 B/s = 19 ms at
    # peak bandwidth, while TP 8's verification reads 141 GB / 8 = 17.6 GB per device: ≥ 5.3 ms. The draft is
    # more than half of the step on every device count, and 32 sequences × 3.36 tokens do not pay for it.
    from costmodel import plan
    out = plan(dict(PLAN70, gamma=4, draft_tensor_parallel=1, target_time_per_output_token_s=0.015))
    assert out["n_devices"] == 8
    assert out["binding_constraint"] == "draft_model" and out["step_bound_by"] == "draft_model"
    assert out["draft_time_per_step_s"] > 0.5 * out["step_latency_s"]
    assert "draft_tensor_parallel" in out["reason"] and "one device" in out["reason"]
    assert out["speedup_vs_ar"] < 1 and "slower than plain decoding" in out["note_speculation"]


def test_plan_tunes_gamma_and_draft_tp_per_configuration():
    from costmodel import evaluate, plan
    out = plan(dict(PLAN70, target_time_per_output_token_s=0.015))
    assert out["feasible"] and out["n_devices"] < 8           # sharding the draft saves devices
    assert out["draft_tensor_parallel"] > 1 and out["speedup_vs_ar"] > 1
    assert "tuned for this batch" in out["reason"]
    # the chosen γ is the best of 1..8 at that configuration (brute force through evaluate)
    cfg = dict(PLAN70, n_devices=out["n_devices"], draft_tensor_parallel=out["draft_tensor_parallel"])
    rates = {g: evaluate(dict(cfg, gamma=g))["tokens_per_s"] for g in range(1, 9)}
    assert out["gamma"] == max(rates, key=rates.get)


def test_plan_keeps_a_given_gamma_and_gamma_is_bounded_by_positions():
    from costmodel import plan
    out = plan(dict(PLAN70, gamma=3, draft_tensor_parallel=2, n_devices=4))
    assert out["gamma"] == 3 and out["draft_tensor_parallel"] == 2 and "tuned" not in out["reason"]
    pos = dict(PLAN70, acceptance_rate=None, acceptance_by_position="0.9,0.8", draft_tensor_parallel=4, n_devices=4)
    out = plan({k: v for k, v in pos.items() if v is not None})
    assert out["gamma"] in (1, 2)


def test_recommend_shards_the_draft_and_names_it_when_it_binds():
    from costmodel import recommend
    out = recommend(dict(PLAN70, n_devices=8))
    spec = next(c for c in out["candidates"] if c["strategy"] == "speculative")
    assert spec["config"].get("draft_tensor_parallel", 1) > 1
    out = recommend(dict(model="llama-3-70b", hardware="h100-sxm", batch_size=32, prompt_len=512, n_devices=8,
                         draft_model="llama-3-8b", draft_tensor_parallel=1, gamma=4, acceptance_rate=0.8))
    assert "the draft binds" in out["reason"]


def _unit_moe_windowed(tmp_path):
    """tests/data/unit-model.yaml made 4 layers, MoE (4 experts, top-2, width 32, 1 shared) and windowed."""
    import os
    d = os.path.join(os.path.dirname(__file__), "data")
    p = tmp_path / "unit-moe-windowed-target.yaml"
    p.write_text(open(f"{d}/unit-model.yaml").read().replace("id: unit-model", "id: unit-moe-windowed-target")
                 .replace("n_layers: 2", "n_layers: 4").replace("n_experts: 1", "n_experts: 4")
                 .replace("experts_per_token: 1", "experts_per_token: 2")
                 + "moe:\n  moe_d_ff: 32\n  n_shared_experts: 1\n"
                 + "attention:\n  window: 64\n  global_layer_every: 2\n")
    return str(p), d


def test_eagle3_head_of_a_moe_windowed_target_is_one_dense_llama_layer(tmp_path):
    from costmodel.engine.strategies.heads import eagle3_head
    from costmodel.inputs.model import load_model
    path, _ = _unit_moe_windowed(tmp_path)
    h = eagle3_head(load_model(path))
    assert (h.n_layers, h.n_moe_layers, h.n_dense_layers, h.n_window_layers, h.attention_window) == (1, 0, 1, 0, None)
    # a token runs the one layer: attention 64·(64 + 2·32) + 64·64 = 12,288, dense FFN 3·64·128 = 24,576
    # (the target's d_ff, not its experts), LM head over V_d = min(32000, 1000) = 1000: 64,000
    assert h.active_params_per_token == 12_288 + 24_576 + 64_000 == 100_864
    # an MLA target's head has plain attention
    assert eagle3_head(load_model("deepseek-v3")).mla is None


def test_eagle3_params_and_embedding_qkv_of_a_small_target_by_hand(tmp_path):
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.strategies.heads import eagle3_ops, head_exec
    from costmodel.inputs.model import load_model
    from costmodel.inputs.record import parse_record
    path, d = _unit_moe_windowed(tmp_path)
    # attention 12,288 + embedding half of q/k/v 64·128 = 8,192 + FFN 24,576 + fc 3·64² = 12,288
    # + LM head V_d·64 + norms 4·64 = 256
    assert eagle3_params(load_model(path)) == 12_288 + 8_192 + 24_576 + 12_288 + 1000 * 64 + 256 == 121_600
    assert eagle3_params(load_model(path), 500) == 12_288 + 8_192 + 24_576 + 12_288 + 500 * 64 + 256 == 89_600
    # on tp = 2 the embedding half of q/k/v is 64 × (64 + 2·32)/2 = 64 × 64 per rank: 2·4,096 FLOPs a token
    ex = build_exec(parse_record(dict(model=f"{d}/unit-model.yaml", hardware=f"{d}/unit-hw.yaml",
                                      runtime=f"{d}/unit-rt.yaml", batch_size=1, prompt_len=10, gen_len=10,
                                      n_devices=2)))
    (qkv,) = eagle3_ops(head_exec(ex, "eagle3"), 3.0, 0.0)
    assert (qkv.name, qkv.count) == ("eagle3_embed_qkv", 1)
    assert float(qkv.flops) == 3 * 2 * 4_096


def test_eagle3_head_weights_on_two_ranks_replicate_the_fc_by_hand():
    import os
    from costmodel.engine.evaluate import build_exec
    from costmodel.engine.strategies.heads import head_weights_bytes, head_weights_total_bytes
    from costmodel.inputs.record import parse_record
    d = os.path.join(os.path.dirname(__file__), "data")
    ex = build_exec(parse_record(dict(model=f"{d}/unit-model.yaml", hardware=f"{d}/unit-hw.yaml",
                                      runtime=f"{d}/unit-rt.yaml", batch_size=1, prompt_len=10, gen_len=10,
                                      n_devices=2)))
    # unit model's head: 121,600 parameters (as above), of them the fc 3·64² = 12,288, kept whole on each
    # of the 2 ranks, the rest split: per rank (121,600 − 12,288)/2 + 12,288 = 66,944 · 2 B (fp16)
    assert head_weights_bytes(ex, "eagle3") == 66_944 * 2 == 133_888
    # over both ranks: 121,600 − 12,288 + 2 · 12,288 = 133,888 parameters · 2 B
    assert head_weights_total_bytes(ex, "eagle3") == 133_888 * 2 == 267_776
    # a draft vocabulary of 500: 89,600 parameters
    assert head_weights_bytes(ex, "eagle3", 500) == ((89_600 - 12_288) / 2 + 12_288) * 2 == 101_888
    assert head_weights_total_bytes(ex, "eagle3", 500) == (89_600 - 12_288 + 2 * 12_288) * 2 == 203_776
