"""MTP (multi-token prediction, DeepSeek-V3) as a chain draft: the target's own module, one decoder layer
plus a 2d×d projection and the shared LM head per draft pass. Hand-computed expectations."""

from __future__ import annotations

import pytest

import costmodel
from costmodel import InputError
from costmodel.engine.evaluate import build_draft, build_exec, evaluate_passes
from costmodel.engine.memory import mtp_weights_device_bytes
from costmodel.inputs.record import parse_record

V3 = dict(model="deepseek-v3", hardware="h200", n_devices=8, batch_size=64, prompt_len=1024, gen_len=128,
          weight_dtype="bf16", kv_dtype="bf16", strategy="speculative", draft_model="mtp", gamma=1,
          acceptance_rate=0.85)

# One DeepSeek-V3 MTP module (d 7168, 128 heads, MLA q_lora 1536, kv_lora 512, rope 64, nope 128, v 128;
# an MoE layer of 256 routed + 1 shared experts of 3·7168·2048):
#   q 7168·1536 + 1536·128·192 = 48,758,784;  kv down 7168·576 = 4,128,768;  kv up 512·128·256 = 16,777,216
#   o 128·128·7168 = 117,440,512  → attention 187,105,280;  norms 2·7168 + 1536 + 512 = 16,384
#   FFN 257·44,040,192 + router 7168·256 = 11,320,164,352;  projection 2·7168² = 102,760,448;  2 norms 14,336
MTP_PARAMS = 187_105_280 + 16_384 + 11_320_164_352 + 102_760_448 + 14_336


def test_mtp_module_parameters_by_hand():
    from costmodel.inputs.model import load_model
    assert MTP_PARAMS == 11_610_060_800 == load_model("deepseek-v3").mtp_params


def test_mtp_weights_per_device_under_tp8():
    # bf16, TP 8: the module's parameters / 8 · 2 B, plus the MLA down-projections every rank keeps
    # ((8 − 1) · 7168 · (1536 + 512 + 64) = 105,971,712 replicated parameters, / 8 · 2 B); the shared
    # embedding and LM head are the target's and not counted again
    ex = build_exec(parse_record(V3))
    mtp = build_draft(parse_record(V3), ex)
    assert mtp.model.n_layers == 1 and mtp.model.n_moe_layers == 1 and (mtp.tp, mtp.pp) == (8, 1)
    assert mtp_weights_device_bytes(mtp) == pytest.approx((MTP_PARAMS + 105_971_712) * 2.0 / 8, rel=1e-12)
    out = costmodel.evaluate(V3)
    assert out["memory_draft_weights_bytes"] == pytest.approx((MTP_PARAMS + 105_971_712) * 2.0 / 8, rel=1e-12)


def test_mtp_kv_is_one_layer_of_latent():
    # the module's one MLA layer: 576 · 2 B = 1,152 B per token, on every TP rank; it holds the context
    # plus the γ drafted tokens: 64 · (1024 + 128 + 1) = 73,792 tokens → 85,008,384 B
    out = costmodel.evaluate(V3)
    assert out["memory_draft_kv_bytes"] == 73_792 * 1_152 == 85_008_384
    # with attention data parallel over 8 groups each keeps its 8 sequences: 1/8 of that
    dp = costmodel.evaluate(dict(V3, expert_parallel=8, tensor_parallel=1))
    assert dp["memory_draft_kv_bytes"] == 85_008_384 / 8


def test_a_draft_pass_is_one_layer_plus_projection_and_head():
    # γ = 3 passes, each: one MoE layer, the 2d×d projection over its 64 tokens, the shared LM head
    passes = evaluate_passes(dict(V3, gamma=3))
    rows = {name: (fl, t) for name, fl, _h, t, _b in passes["draft"].cost.ops}
    # projection FLOPs over all 8 devices and 3 passes: 3 · 2 · (2·7168·7168) · 64
    assert float(rows["mtp_projection"][0]) == pytest.approx(3 * 2.0 * 2 * 7168 * 7168 * 64, rel=1e-12)
    # routed experts: 3 passes · 2 · 44,040,192 · 8 experts · 64 tokens
    assert float(rows["moe_ffn"][0]) == pytest.approx(3 * 2.0 * 44_040_192 * 8 * 64, rel=1e-12)
    # LM head, 129,280 × 7168, 64 tokens, 3 passes
    assert float(rows["lm_head"][0]) == pytest.approx(3 * 2.0 * 129_280 * 7168 * 64, rel=1e-12)


def test_second_token_acceptance_from_the_deepseek_report():
    # DeepSeek-V3 technical report (arXiv:2412.19437, §5.4.3): the second token is accepted 85–90 % of the
    # time, 1.8× the tokens per second. γ = 1: τ = 1 + α = 1.85 at α = 0.85
    out = costmodel.evaluate(V3)
    assert out["tokens_per_step"] == pytest.approx(1.85, rel=1e-12)
    assert 1.0 < out["speedup_vs_ar"] < 1.85      # the verify pass of 2 tokens costs more than a 1-token step


@pytest.mark.parametrize("change,field", [
    (dict(model="llama-3.1-8b", n_devices=1), "draft_model"),               # no MTP module
    (dict(draft_placement="separate_device"), "draft_placement"),          # part of the target
    (dict(strategy="tree", tree_nodes=4), "draft_model"),                  # one token per pass: a chain
])
def test_mtp_misuse_is_an_input_error(change, field):
    with pytest.raises(InputError) as exc:
        costmodel.evaluate(dict(V3, **change))
    assert f"field '{field}'" in str(exc.value)
