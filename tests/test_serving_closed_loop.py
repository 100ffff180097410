"""Closed loop (``max_concurrency`` = N clients): each completion frees one client, which sends its next
request at that moment, and latencies count from then (as AIPerf / genai-perf and ``vllm bench serve
--max-concurrency`` measure them).

By hand: 4 clients, 12 requests of one fixed length, every request due at t = 0. The first 4 go
out together and finish in the same step at T; the 4 freed clients send requests 5-8 at T, which
run exactly as the first wave did (same batch, same lengths), and 9-12 at 2T. So every request has
the same TTFT and E2E (= T), the run lasts 3T and completes 12 / 3T requests per second. (Before
requests finishing in one step each freed their own client, only one of them was stamped as sent
at T; the other three kept the due time 0 and counted 1-2 waves of waiting in their TTFT.)"""

import math

import pytest

import costmodel


def test_requests_finishing_in_one_step_each_send_their_clients_next_request():
    r = costmodel.serve({"model": "llama-3-8b", "hardware": "h100-sxm"}, prompt_len=512, gen_len=64,
                        max_concurrency=4, request_rate=math.inf, num_requests=12)
    ttft, e2e = r["ttft_s"], r["e2e_s"]
    assert ttft["p99"] == pytest.approx(ttft["p50"], rel=1e-9)
    assert ttft["mean"] == pytest.approx(ttft["p50"], rel=1e-9)
    assert e2e["p99"] == pytest.approx(e2e["p50"], rel=1e-9)
    T = e2e["p50"]
    assert r["duration_s"] == pytest.approx(3 * T, rel=1e-9)
    assert r["request_throughput_per_s"] == pytest.approx(12 / (3 * T), rel=1e-9)
