"""SGLang's scheduler defaults (costmodel/serving/engines.py), hand-computed from its source rules:
max_running_requests = min(pool // 2, min(max(int(pool / context_len × 512), 2048), 4096)), prefill
batches of at most chunked_prefill_size = 8192 tokens that run alone (enable_mixed_chunk = False)."""

import os

import pandas as pd
import pytest

from costmodel.serving.engines import sglang_max_running_requests, sglang_scheduler

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("pool, ctx, want", [
    # 1,000,000 / 131,072 × 512 = 3906.25 -> 3906, inside [2048, 4096]; pool // 2 = 500,000
    (1_000_000, 131_072, 3906),
    # 200,000 / 131,072 × 512 = 781.25 -> raised to the pool's floor of 2048 requests
    (200_000, 131_072, 2048),
    # 2,000,000 / 8,192 × 512 = 125,000 -> capped at 4096
    (2_000_000, 8_192, 4096),
    # a pool of 3,000 tokens: the floor gives 2048, but pool // 2 = 1500 is lower
    (3_000, 131_072, 1500),
])
def test_sglang_max_running_requests(pool, ctx, want):
    assert sglang_max_running_requests(pool, ctx) == want


def test_sglang_scheduler_fields():
    assert sglang_scheduler(1_000_000, 131_072) == {"max_num_seqs": 3906, "chunked_prefill": False,
                                                    "max_num_batched_tokens": 8192}


def test_sglang_rows_run_sglangs_scheduler_not_vllms_256_sequences(slc):
    """LC041 (DataCrunch, Llama-3.3-70B on 4×H200 at 16 req/s): SGLang admits everything the KV pool
    holds, so its median TTFT stays at 0.61 s while E2E reaches 149 s. Under vLLM's 256-sequence
    limit the simulated requests queue for seconds instead. With SGLang's limit (thousands) the median
    TTFT is a prefill wait, below a second."""
    d = pd.read_csv(os.path.join(HERE, "..", "validation", "load_curves.csv"))
    row = d[d.id == "LC041"].iloc[0]
    assert slc.is_sglang(row)
    assert slc.predict(row, None) < 1.0             # 3200 requests, as the benchmark sent
