"""vLLM V0's batch-expansion scorer (costmodel/engine/strategies/common.py chain_verify_shape): each of B
sequences verifying q = γ+1 tokens becomes q single-query sequences at contexts L, L+1, …, L+q−1, each
reading its own cached context; the multi-query scorer reads each sequence's KV once."""

import numpy as np
import pytest

from costmodel.engine.evaluate import build_exec
from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.strategies.common import chain_verify_shape, decode_shape
from costmodel.inputs.record import parse_record
from costmodel.inputs.runtime import load_runtime
from costmodel.serving.stepcost import StepCosts


def test_expanded_shape_by_hand():
    """B = 2, q = 5, L = 100: expanded KV read 2 × (100 + 101 + 102 + 103 + 104) = 2 × 510 = 1020 tokens
    (multi-query: 2 × 100 = 200); pairs 2 × (101 + … + 105) = 2 × 515 = 1030 either way; 10 sequences."""
    be = chain_verify_shape(2.0, 5.0, 100.0, "batch_expansion")
    mq = chain_verify_shape(2.0, 5.0, 100.0, "multi_query")
    assert float(be.kv_hbm_tokens) == 1020.0 and float(mq.kv_hbm_tokens) == 200.0
    assert float(be.pairs) == float(mq.pairs) == 1030.0
    assert float(be.tokens) == float(mq.tokens) == 10.0 and float(be.lm_tokens) == 10.0
    assert float(be.seqs) == 10.0
    ref = decode_shape(2.0, 5.0, 100.0)
    assert float(mq.kv_hbm_tokens) == float(ref.kv_hbm_tokens)


def test_v0_engines_score_by_batch_expansion():
    assert load_runtime("vllm@0.5").spec_scorer == load_runtime("vllm@0.6").spec_scorer == "batch_expansion"
    assert load_runtime("vllm").spec_scorer == "multi_query"          # V1 (0.8+)
    assert load_runtime("trt-llm").spec_scorer == "multi_query"


def test_expanded_verify_pass_reads_the_extra_kv_bytes():
    """Llama-3-8B on one H100, bf16 KV: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 4096 B per token
    per layer. B = 1, γ = 4 (q = 5), L = 1000: expansion reads 5 × 1000 + 10 = 5010 KV tokens per layer
    instead of 1000, 4010 more: 32 × 4010 × 4096 B = 525,598,720 B more HBM traffic in the verify pass."""
    rec = parse_record(dict(model="llama-3-8b", hardware="h100-sxm", runtime="vllm@0.6", strategy="autoregressive",
                            batch_size=1, prompt_len=1000, gen_len=2))
    ex = build_exec(rec)
    be = pass_cost(chain_verify_shape(1.0, 5.0, 1000.0, "batch_expansion"), ex)
    mq = pass_cost(chain_verify_shape(1.0, 5.0, 1000.0, "multi_query"), ex)
    assert float(np.ravel(be.hbm_bytes)[0] - np.ravel(mq.hbm_bytes)[0]) == pytest.approx(32 * 4010 * 4096, rel=1e-9)
    assert float(np.ravel(be.time_s)[0]) > float(np.ravel(mq.time_s)[0])


@pytest.mark.parametrize("runtime, k0, k1", [("vllm@0.6", 10.0, 5.0), ("vllm", 0.0, 1.0)])
def test_serving_step_prices_the_engines_scorer(runtime, k0, k1):
    """The simulator's per-sequence KV read of a γ = 4 chain, k0 + k1·L: expansion Σ_j (L + j), j = 0…4,
    = 5·L + 10; multi-query L."""
    rec = parse_record(dict(model="llama-3-8b", hardware="h100-sxm", runtime=runtime, strategy="speculative",
                            draft_model="llama-3.2-1b", gamma=4, acceptance_rate=0.75, batch_size=1,
                            prompt_len=512, gen_len=128))
    gc = StepCosts(rec, 4, 2048, 1024.0).gamma_costs(4)
    assert (gc.k0, gc.k1) == (k0, k1)
    assert gc.q_tok == 5.0
