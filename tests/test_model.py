import json

import pytest

from costmodel import InputError, load_model


@pytest.mark.parametrize("mid,published", [("llama-2-7b", 6.74e9), ("llama-2-70b", 6.90e10),
                                           ("llama-3-8b", 8.03e9), ("mixtral-8x7b", 4.67e10)])
def test_parameter_counts_match_published(mid, published):
    assert load_model(mid).n_params == pytest.approx(published, rel=0.005)


def test_every_zoo_model_matches_its_published_count():
    from costmodel.inputs.specs import zoo_ids
    ids = zoo_ids("model_specs")
    assert len(ids) >= 15
    for i in ids:
        m = load_model(i)
        if m.published_params_scope == "text+vision":      # the card's count includes a vision encoder
            assert 0.95 * m.published_params < m.n_params < m.published_params + m.published_params_rounding, i
        else:   # within 1 %, or within the rounding of a figure given to one digit ("1T" = 1.0e12 ± 5e10)
            assert abs(m.n_params - m.published_params) <= max(0.01 * m.published_params,
                                                               m.published_params_rounding), i


def test_llama2_7b_param_count_by_hand():
    # per layer: attention 4·4096² = 67,108,864; FFN 3·4096·11008 = 135,266,304; norms 2·4096
    per_layer = 4 * 4096 ** 2 + 3 * 4096 * 11008 + 2 * 4096
    total = 32 * per_layer + 2 * 32000 * 4096 + 4096      # + embeddings, LM head, final norm
    assert total == 6_738_415_616
    assert load_model("llama-2-7b").n_params == total


def test_kv_bytes_per_token_by_hand():
    # 2 (K and V) · 80 layers · 8 KV heads · 128 · 2 bytes = 327,680 B
    assert load_model("llama-2-70b").kv_bytes_per_token(2) == 327_680
    assert load_model("llama-2-7b").kv_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2 == 524_288
    assert load_model("llama-3-8b").kv_bytes_per_token(2) == 131_072


def test_zoo_ids_are_case_insensitive():
    assert load_model("LLaMA-2-7B").n_layers == 32


def test_hf_config_json(tmp_path):
    cfg = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
           "tie_word_embeddings": False, "model_type": "mixtral"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = load_model(str(p))
    assert m.n_params == load_model("mixtral-8x7b").n_params
    assert m.head_dim == 128 and m.n_experts == 8 and m.experts_per_token == 2


def test_hf_config_missing_field_names_file_and_field(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(InputError) as e:
        load_model(str(p))
    assert "config.json" in str(e.value) and "num_attention_heads" in str(e.value)


def test_unknown_model_suggests(tmp_path):
    with pytest.raises(InputError) as e:
        load_model("llama-2-7")
    assert "llama-2-7b" in str(e.value)
