"""A record whose context passes the model's max_context is an input error, everywhere a record is priced."""

from __future__ import annotations

import re

import pytest

import costmodel
from costmodel import InputError
from costmodel.analysis.sweep import sweep
from costmodel.cli.main import main

# Llama-2-7B: max_position_embeddings 4096
L2 = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1)


def test_a_context_of_exactly_max_context_is_priced():
    # 4000 prompt + 96 generated = 4096 tokens = max_context: allowed
    out = costmodel.evaluate(dict(L2, prompt_len=4000, gen_len=96))
    assert out["step_latency_s"] > 0


def test_one_token_past_max_context_names_the_field_and_the_limit():
    # 4000 + 97 = 4097 > 4096
    with pytest.raises(InputError) as exc:
        costmodel.evaluate(dict(L2, prompt_len=4000, gen_len=97))
    msg = str(exc.value)
    assert "field 'prompt_len'" in msg and "4097" in msg and "max_context 4096" in msg
    assert "prompt_len + gen_len <= max_context = 4096" in msg


def test_the_default_gen_len_counts():
    # gen_len defaults to 128: a 4096-token prompt reaches 4224
    with pytest.raises(InputError, match="4224 exceeds llama-2-7b's max_context 4096"):
        costmodel.evaluate(dict(L2, prompt_len=4096))


def test_shared_prefix_branches_count_prefix_and_branch():
    # a branch's context is its prompt (2048, of which 1024 shared) plus its 2049 generated tokens: 4097
    rec = dict(L2, strategy="shared_prefix", n_branches=4, prompt_len=2048, shared_prefix_len=1024)
    costmodel.evaluate(dict(rec, gen_len=2048))                      # 4096: allowed
    with pytest.raises(InputError, match="4097 exceeds"):
        costmodel.evaluate(dict(rec, gen_len=2049))


def test_the_long_context_variant_takes_the_same_record():
    # llama-2-7b-32k has Llama-2-7B's dimensions and 32768 tokens: same numbers below 4096, and 4224 passes
    a = costmodel.evaluate(dict(L2, prompt_len=2000))
    b = costmodel.evaluate(dict(L2, model="llama-2-7b-32k", prompt_len=2000))
    assert a["step_latency_s"] == b["step_latency_s"]
    costmodel.evaluate(dict(L2, model="llama-2-7b-32k", prompt_len=4096))


def test_a_sweep_row_beyond_max_context_refuses_the_grid():
    # prompt_len 3968 + 128 = 4096 fits; 4000 + 128 = 4128 does not: the whole grid is refused
    sweep(dict(L2), prompt_len=[16, 3968])
    with pytest.raises(InputError, match="4128 exceeds llama-2-7b's max_context 4096"):
        sweep(dict(L2), prompt_len=[16, 4000])


def test_cli_exit_2_one_line(capsys):
    assert main(["eval", "model=llama-2-7b", "hardware=a100-80gb", "batch_size=1", "prompt_len=4000",
                 "gen_len=200"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "max_context 4096" in err and "Traceback" not in err


def test_serving_requests_beyond_max_context_are_refused():
    with pytest.raises(InputError, match=re.escape("prompt_len + gen_len = 4200 tokens, beyond llama-2-7b's max_context 4096")):
        costmodel.serve(dict(L2, runtime="vllm"), request_rate=1.0, num_requests=4, prompt_len=4000, gen_len=200)


def test_a_sweep_marks_rows_beyond_max_context_with_on_invalid_mark():
    # 3968 + 128 = 4096 is priced; 4000 + 128 = 4128 is marked with its reason, the rest untouched
    df = sweep(dict(L2), prompt_len=[16, 3968, 4000], on_invalid="mark")
    assert df["invalid_reason"].tolist() == [None, None, "prompt_len + gen_len beyond the model's max_context"]
    assert df["step_latency_s"].iloc[:2].notna().all() and df["step_latency_s"].isna().iloc[2]
    ok = sweep(dict(L2), prompt_len=[16, 3968])
    assert df["step_latency_s"].iloc[1] == ok["step_latency_s"].iloc[1]


def test_a_sweep_over_models_marks_the_short_one():
    # a fixed 4000-token prompt: Llama-2-7B (4096) is refused, its 32K variant is priced
    df = sweep(dict(L2, prompt_len=4000), model=["llama-2-7b", "llama-2-7b-32k"], on_invalid="mark")
    assert df["invalid_reason"].iloc[0] is not None and df["invalid_reason"].iloc[1] is None
    with pytest.raises(InputError, match="4128 exceeds llama-2-7b's max_context 4096"):
        sweep(dict(L2, prompt_len=4000), model=["llama-2-7b", "llama-2-7b-32k"])
