"""MLA, MoE with shared experts and dense layers, sliding/chunked windows, max_context and draft
vocabularies: hand-computed values from the configs' numbers."""

from pathlib import Path

import pytest

from costmodel import InputError, evaluate, load_model
from costmodel.engine.evaluate import build_exec
from costmodel.inputs.record import parse_record

HF = Path(__file__).parent / "data" / "hf"


def test_deepseek_v3_mla_kv_bytes_per_token():
    # MLA caches kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576 elements per token per layer, 61 layers
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token(2.0) == (512 + 64) * 61 * 2 == 70_272      # bf16
    assert m.kv_bytes_per_token(1.0) == (512 + 64) * 61 == 35_136          # fp8
    # the latent is shared by every head: a TP rank holds all of it (not split 8 ways)
    ex = build_exec(parse_record(dict(model="deepseek-v3", hardware="b200", batch_size=1, prompt_len=1,
                                      n_devices=8, weight_dtype="fp8", kv_dtype="fp8")))
    from costmodel.engine import memory
    assert memory.kv_bytes_per_token_device(ex) == 576 * 1.0 * 61


def test_deepseek_v3_total_and_active_params():
    d, h = 7168, 128
    attn = (d * 1536 + 1536 * h * (128 + 64)       # q down, q up (nope 128 + rope 64)
            + d * (512 + 64) + 512 * h * (128 + 128)  # kv down (latent + rope key), kv up (K nope + V)
            + h * 128 * d)                            # o
    assert attn == 187_105_280
    expert = 3 * d * 2048                             # 44,040,192
    dense_ffn = 3 * d * 18432                         # 396,361,728
    router = d * 256
    norms = 2 * d + 1536 + 512
    total = (61 * (attn + norms) + 3 * dense_ffn + 58 * ((256 + 1) * expert + router)
             + 2 * 129280 * d + d)
    m = load_model("deepseek-v3")
    assert m.n_params == total                         # 671.03e9: the card's 671B
    active = 61 * attn + 3 * dense_ffn + 58 * ((8 + 1) * expert + router) + 129280 * d
    assert m.active_params_per_token == active         # 36.6e9: the card's 37B
    assert active == pytest.approx(3.7e10, rel=0.02)


def test_gpt_oss_kv_with_sliding_window_layers():
    # 36 layers alternate sliding (window 128) and full attention: 18 + 18; per layer 2·8·64 = 1024 elements
    m = load_model("gpt-oss-120b")
    assert (m.n_window_layers, m.n_global_layers) == (18, 18)
    per_layer_bf16 = 2 * 8 * 64 * 2                   # 2048 bytes
    assert m.kv_bytes_per_token(2.0) == 36 * per_layer_bf16 == 73_728
    # one 8192-token sequence: full layers hold 8192 tokens, sliding layers only 128
    assert m.kv_bytes_per_sequence(8192, 2.0) == per_layer_bf16 * (18 * 8192 + 18 * 128) == 306_708_480
    # the engine's KV memory for 4 sequences of 8192 tokens on one device
    out = evaluate(dict(model="gpt-oss-120b", hardware="h200", batch_size=4, prompt_len=8064, gen_len=128,
                        weight_dtype="bf16"))
    assert out["memory_target_kv_bytes"] == 4 * 306_708_480


def test_window_caps_attention_bytes():
    # decode at context 8192 + 64: sliding layers read 128 tokens per sequence, full layers the context
    rec = dict(model="gpt-oss-20b", hardware="h200", batch_size=1, prompt_len=8192, gen_len=128,
               weight_dtype="bf16")
    ops = {o["name"]: o for o in evaluate(rec, details=True)["operators"]}
    L = 8192 + 64                                      # mean context while decoding
    kv_tok = 2 * 8 * 64 * 2                            # bytes per token per layer
    q_traffic = 2 * 4096 * 2                           # q in and o out, 64 heads × 64, bf16
    assert ops["attention"]["hbm_bytes"] == pytest.approx(12 * (L * kv_tok + kv_tok + q_traffic))
    assert ops["attention_window"]["hbm_bytes"] == pytest.approx(12 * (128 * kv_tok + kv_tok + q_traffic))


def test_moe_dense_first_layers_and_maverick_interleave():
    m = load_model("deepseek-v3")
    assert (m.n_dense_layers, m.n_moe_layers) == (3, 58)
    mav = load_model("llama-4-maverick")      # MoE on every 2nd of 48 layers; 128 routed + 1 shared, 8192 wide
    assert (mav.n_dense_layers, mav.n_moe_layers) == (24, 24)
    attn = 5120 * (5120 + 2 * 1024) + 5120 * 5120
    active = 48 * attn + 24 * 3 * 5120 * 16384 + 24 * (2 * 3 * 5120 * 8192 + 5120 * 128) + 202048 * 5120
    assert mav.active_params_per_token == active


def test_llama4_chunked_attention_layers():
    m = load_model("llama-4-scout")
    assert (m.window_kind, m.attention_window, m.n_global_layers, m.n_window_layers) == ("chunked", 8192, 12, 36)


def test_context_beyond_max_context_is_an_input_error():
    from costmodel.engine.evaluate import check_context
    rec = parse_record(dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=4000, gen_len=128))
    with pytest.raises(InputError, match="max_context"):          # 4000 + 128 = 4128 > 4096
        check_context(rec, load_model("llama-2-7b"))
    check_context(rec.replace(gen_len=96), load_model("llama-2-7b"))   # 4096: allowed
    import numpy as np
    with pytest.raises(InputError, match="max_context"):          # any element of a sweep
        check_context(rec, load_model("llama-2-7b"), {"prompt_len": np.array([16, 4000])})


def test_draft_with_another_vocabulary_is_an_input_error():
    # Llama-3 (128,256 tokens) cannot verify a Llama-2-tokenizer draft (32,000)
    with pytest.raises(InputError, match="vocabulary"):
        evaluate(dict(model="llama-3-8b", hardware="h100-sxm", batch_size=1, prompt_len=128,
                      strategy="speculative", draft_model="llama-68m", acceptance_rate=0.7))


@pytest.mark.parametrize("name,zoo", [("deepseek-v3", "deepseek-v3"), ("kimi-k2", "kimi-k2"),
                                      ("gpt-oss-120b", "gpt-oss-120b"), ("gemma-2-9b", "gemma-2-9b"),
                                      ("gemma-3-27b", "gemma-3-27b"), ("llama-4-scout", "llama-4-scout"),
                                      ("qwen3-30b-a3b", "qwen3-30b-a3b"), ("qwen2.5-7b", "qwen2.5-7b"),
                                      ("mistral-7b", "mistral-7b")])
def test_hf_configs_import_like_the_zoo(name, zoo):
    hf, z = load_model(str(HF / f"{name}.json")), load_model(zoo)
    for attr in ("n_params", "active_params_per_token", "n_window_layers", "attention_window", "window_kind",
                 "n_moe_layers", "mla", "max_context", "vocab_size"):
        assert getattr(hf, attr) == getattr(z, attr), attr
    assert hf.kv_bytes_per_token(2.0) == z.kv_bytes_per_token(2.0)


def test_fp4_block_formats_bytes_per_param():
    from costmodel.inputs import dtypes
    # NVFP4: 4-bit E2M1 + one 8-bit E4M3 scale per 16 -> (4 + 8/16)/8 = 0.5625 B
    assert dtypes.weight_bytes_per_param("nvfp4") == 0.5 + 1.0 / 16 == 0.5625
    # MXFP4: 4-bit E2M1 + one 8-bit E8M0 scale per 32 -> 17 B per 32 = 0.53125 B
    assert dtypes.weight_bytes_per_param("mxfp4") == 17 / 32 == 0.53125


def test_fp4_runs_natively_on_blackwell_and_weight_only_on_hopper():
    rec = dict(model="gpt-oss-120b", hardware="b200", batch_size=1, prompt_len=1024, weight_dtype="mxfp4")
    b200 = build_exec(parse_record(rec))
    h100 = build_exec(parse_record(dict(rec, hardware="h100-sxm")))
    assert b200.compute_dtype == "fp4" and b200.dequant_flops_per_weight == 0.0
    assert h100.compute_dtype == "fp16"      # unpacked and scaled like int4 (the runtime's int4 figure)
    assert h100.dequant_flops_per_weight == h100.rt.dequant_flops_per_weight_int4
    assert b200.kv_dtype == "fp16"
    # every decoder matrix at 0.53125 B (the default runtime quantises embedding and LM head too)
    assert b200.w_bytes == 0.53125
    # gpt-oss-120b in MXFP4: 116.8e9 params x ~0.53 B = ~62 GB, fits one 80 GB H100
    out = evaluate(dict(rec, hardware="h100-sxm"))
    assert out["weights_bytes"] == pytest.approx(load_model("gpt-oss-120b").n_params * 0.53125, rel=0.02)
    assert out["fits"]


def test_fp4_fallback_is_noted():
    out = evaluate(dict(model="gpt-oss-120b", hardware="h100-sxm", batch_size=1, prompt_len=1024,
                        weight_dtype="mxfp4"))
    assert any("mxfp4 weights run weight-only" in n for n in out["notes"])
    native = evaluate(dict(model="gpt-oss-120b", hardware="b200", batch_size=1, prompt_len=1024,
                           weight_dtype="mxfp4"))
    assert not any("weight-only" in n for n in native["notes"])


def test_models_show_and_list_give_the_architecture_facts(capsys):
    import json

    from costmodel.cli.main import main
    assert main(["models", "show", "deepseek-v3", "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    # active per token: 61 MLA layers · 187,105,280 + 3 dense FFNs · 3·7168·18432 + 58 MoE layers ·
    # ((8 routed + 1 shared) · 3·7168·2048 + router 7168·256) + LM head 129,280·7168
    assert s["active_params_per_token"] == (61 * 187_105_280 + 3 * 3 * 7168 * 18432
                                            + 58 * (9 * 3 * 7168 * 2048 + 7168 * 256) + 129_280 * 7168)
    assert s["active_params_per_token"] == 36_624_596_992
    assert s["kv_bytes_per_token_fp8"] == (512 + 64) * 61 == 35_136          # MLA latent + rope key
    assert s["mtp_params"] == 11_610_060_800 and s["n_moe_layers"] == 58
    assert main(["models", "list", "--format", "json"]) == 0
    rows = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["gpt-oss-120b"]["attention"] == "GQA 8 kv, sliding 128, 1 in 2 global"
    assert rows["llama-4-scout"]["attention"] == "GQA 8 kv, chunked 8192, 1 in 4 global"
    assert rows["deepseek-v3"]["experts"] == "256 top-8 +1 shared" and rows["deepseek-v3"]["mtp_layers"] == 1
    assert rows["llama-2-7b"]["max_context"] == 4096
