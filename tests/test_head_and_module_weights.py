"""Draft heads and the MTP module on the target's devices, by hand on the unit model: the EAGLE-3 head's
operators (the fc's 3·d inputs, the draft group) and Exec (one pipeline stage), an EAGLE head's weights,
the MTP module's own weights when tied or quantised, MLA's replicated down-projections without a q LoRA,
and the activations of the largest of several passes.

Unit model (tests/data/unit-model.yaml): 2 layers, d 64, 4 query heads and 2 KV heads of 16 (q 64,
kv 32), d_ff 128 gated, vocabulary 1000, fp16. One layer: q/k/v 64·(64 + 2·32) = 8,192 and o 64·64 =
4,096 parameters (attention 12,288), FFN 3·64·128 = 24,576, two norms 2·64 = 128.
"""

import dataclasses
import os

import pytest

from costmodel.engine.evaluate import build_draft, build_exec
from costmodel.engine.memory import (kv_bytes_per_token_device, mtp_weights_device_bytes, target_breakdown,
                                     weights_device_bytes)
from costmodel.engine.strategies.heads import eagle3_ops, head_exec, head_weights_bytes, head_weights_total_bytes
from costmodel.inputs.record import parse_record

D = os.path.join(os.path.dirname(__file__), "data")
LAYER = 12_288 + 24_576 + 128       # 36,992 parameters


def _ex(model=f"{D}/unit-model.yaml", rt=None, **kw):
    rec = dict(model=model, hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml", batch_size=2,
               prompt_len=100, gen_len=20)
    rec.update(kw)
    ex = build_exec(parse_record(rec))
    return ex if rt is None else dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, **rt))


# --------------------------------------------------------------------------- EAGLE-3 and EAGLE heads
def test_eagle3_fc_reads_three_hidden_states_per_token_by_hand():
    # the fc: 3·64 × 64 = 12,288 weights (2 B), over 2 fused tokens each reading 3·64 inputs and writing
    # 64 (2 B); the embedding half of q/k/v: 64 × (64 + 2·32) = 8,192 weights, 64 in and 128 out a token
    head = head_exec(_ex(), "eagle3")
    embed, fc = eagle3_ops(head, 2.0, 2.0)
    assert (fc.name, float(fc.flops), float(fc.hbm_bytes)) == ("eagle3_fc", 2 * 12_288 * 2,
                                                               12_288 * 2 + 2 * (192 + 64) * 2)
    assert (float(embed.flops), float(embed.hbm_bytes)) == (2 * 8_192 * 2, 8_192 * 2 + 2 * (64 + 128) * 2)
    assert embed.group == fc.group == "draft"
    assert embed.count == fc.count == 1


def test_heads_run_whole_on_one_pipeline_stage_by_hand():
    # the target on 2 stages (pp 2) keeps 1 of its 2 layers a device; a head's one layer is whole on
    # one stage: K and V of a token 2·2·16·2 = 128 B, not 128/2
    ex = _ex(n_devices=2, pipeline_parallel=2)
    assert (ex.pp, kv_bytes_per_token_device(ex)) == (2, 128 * 2 / 2)
    for kind in ("eagle3", "eagle"):
        head = head_exec(ex, kind)
        assert (head.pp, head.model.n_layers, kv_bytes_per_token_device(head)) == (1, 1, 128)


def test_eagle_head_weights_per_device_and_in_total_by_hand():
    # EAGLE: one layer's attention 12,288 + FFN 24,576 + 2·64 norms + the 2d×d fusion 2·64² = 8,192:
    # 45,184 parameters at 2 B, split over tp 2 (nothing replicated)
    assert 12_288 + 24_576 + 2 * 64 + 2 * 64 * 64 == 45_184
    ex = _ex(n_devices=2)
    assert head_weights_bytes(ex, "eagle") == 45_184 * 2 / 2
    assert head_weights_total_bytes(ex, "eagle") == 45_184 * 2


# --------------------------------------------------------------------------- MTP module
def _mtp(tmp_path, tied, rt=None, **kw):
    text = open(f"{D}/unit-model.yaml").read().replace("id: unit-model", f"id: unit-mtp-{tied}")
    text = text.replace("tied_embeddings: false", f"tied_embeddings: {str(tied).lower()}") + "mtp_layers: 1\n"
    p = tmp_path / f"unit-mtp-{tied}.yaml"
    p.write_text(text)
    rec = parse_record(dict(model=str(p), hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml",
                            batch_size=2, prompt_len=100, gen_len=20, strategy="speculative", draft_model="mtp",
                            gamma=1, acceptance_rate=0.8, **kw))
    ex = build_exec(rec)
    if rt is not None:
        ex = dataclasses.replace(ex, rt=dataclasses.replace(ex.rt, **rt))
    return build_draft(rec, ex)


@pytest.mark.parametrize("tied", [False, True])
def test_mtp_module_weights_tied_or_not_by_hand(tmp_path, tied):
    # fp16: one layer 36,992 + the 2d×d projection 2·64·64 = 8,192 + its two norms 2·64 = 128 parameters,
    # 2 B each; the embedding, LM head (tied or not) and final norm are the target's, not counted again
    assert mtp_weights_device_bytes(_mtp(tmp_path, tied)) == (LAYER + 8_192 + 128) * 2 == 90_624


@pytest.mark.parametrize("tied", [False, True])
def test_quantised_mtp_module_weights_by_hand(tmp_path, tied):
    # int8 with a 2-byte scale per output channel: a weight costs 1 + 2/d_in B (d_in 64: 1.03125,
    # 128: 1.015625); norms stay fp16. The layer: q/k/v, o and FFN gate/up 8,192 + 4,096 + 16,384 =
    # 28,672 at d_in 64 → 29,568 B; FFN down 64·128 at d_in 128 → 8,320 B; norms 128 · 2 = 256 B.
    # The projection: 8,192 weights at d_in 2·64 = 128 → 8,320 B; its norms 256 B. Split over tp 2.
    mtp = _mtp(tmp_path, tied, rt=dict(int8_scale_bytes_per_group=2.0), weight_dtype="int8", n_devices=2)
    assert mtp.tp == 2
    layer = 28_672 * (1 + 2 / 64) + 8_192 * (1 + 2 / 128) + 256
    assert layer == 38_144
    assert mtp_weights_device_bytes(mtp) == (layer + 8_192 * (1 + 2 / 128) + 256) / 2 == 23_360


# --------------------------------------------------------------------------- MLA, activations
def test_mla_without_q_lora_replicates_only_the_kv_down_projection_by_hand(tmp_path):
    # MLA (kv_lora 32, rope 8, nope 16, v 16, no q LoRA): per layer q 64·4·24 = 6,144, kv down 64·40 =
    # 2,560, kv up 32·4·32 = 4,096, o 64·64 = 4,096 (16,896); norms 2·64 + 32 = 160; FFN 24,576:
    # 41,632 a layer, 2 layers + embedding 64,000 + LM head 64,000 + final norm 64 = 211,328. On tp 2
    # every rank keeps the down-projection 64·(0 + 32 + 8) of each layer: (2 − 1)·2,560·2 = 5,120 more
    p = tmp_path / "unit-mla.yaml"
    p.write_text(open(f"{D}/unit-model.yaml").read().replace("id: unit-model", "id: unit-mla")
                 + "mla:\n  kv_lora_rank: 32\n  q_lora_rank: null\n  qk_rope_head_dim: 8\n"
                 + "  qk_nope_head_dim: 16\n  v_head_dim: 16\n")
    ex = _ex(str(p), n_devices=2)
    assert ex.model.n_params == 2 * 41_632 + 128_064 == 211_328
    assert weights_device_bytes(ex) == (211_328 + 5_120) * 2 / 2


def test_activations_are_those_of_the_largest_pass_whichever_comes_last():
    # per token 2·64 + (64 + 2·32) + 64 + 3·128 = 704 activations of 2 B; fp32 logits 1000 · 4 B a row.
    # A decode pass of 2 tokens (2 rows of logits): 2·704·2 + 2·4,000 = 10,816 B; a prefill of 100
    # tokens (1 row): 100·704·2 + 4,000 = 144,800 B — the larger, listed second or first
    ex = _ex()
    small, large = (2.0, 2.0, 0.0), (100.0, 1.0, 0.0)
    for passes in ([small, large], [large, small], [small, small, large]):
        assert float(target_breakdown(ex, 0.0, passes)["activations"]) == 144_800
    assert float(target_breakdown(ex, 0.0, [small])["activations"]) == 10_816
