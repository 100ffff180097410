"""serve(record, **workload), max_rate(...), frontier(...): the serving layer's entry points."""

from __future__ import annotations

import math

from costmodel.errors import InputError, suggest
from costmodel.inputs.record import FIELD_NAMES, parse_record
from costmodel.serving.workload import WORKLOAD_FIELDS, Workload, generate, parse_workload

#: record fields that a workload gives instead (the record's own values are ignored by serving)
_SHARED = ("prompt_len", "gen_len")


def split_fields(record, workload: dict | None = None):
    """(Record, Workload) from one flat mapping plus workload keywords. ``prompt_len`` / ``gen_len``
    belong to the workload; the record gets representative values (the means) for parsing."""
    data = dict(record) if isinstance(record, dict) else {f: getattr(record, f) for f in FIELD_NAMES}
    data.update(workload or {})
    wdata = {k: data.pop(k) for k in list(data) if k in WORKLOAD_FIELDS and k not in FIELD_NAMES}
    for k in data:
        if k not in FIELD_NAMES:
            raise InputError(f"unknown field{suggest(k, FIELD_NAMES + WORKLOAD_FIELDS)}", field=k,
                             allowed="record fields (docs/serving.md) and workload fields")
    for k in _SHARED:
        if data.get(k) is not None:
            wdata[k] = data[k]
    w = parse_workload(wdata)
    data.setdefault("batch_size", 1)
    for k, dist in (("prompt_len", w.prompt_len_dist), ("gen_len", w.gen_len_dist)):
        if data.get(k) is None:
            data[k] = int(max(1, round(dist[1] if dist and dist[0] in ("fixed", "lognormal")
                                      else (dist[1] + dist[2]) / 2 if dist else 512 if k == "prompt_len" else 128)))
    rec = parse_record(data)
    w = engine_defaults(rec, w, given=set(wdata))
    if w.shared_prompt_len and w.max_num_batched_tokens < 1:
        raise InputError("max_num_batched_tokens must be positive", field="max_num_batched_tokens")
    return rec, w


def engine_defaults(rec, w: Workload, given) -> Workload:
    """The scheduler fields the workload does not give, from the runtime's engine version
    (``runtime=vllm@0.6``: its ``scheduler`` defaults); ``max_num_batched_tokens`` falls back to the
    runtime's prefill chunk, else 8192; ``max_model_len`` = the model's context, at least 2048."""
    from costmodel.inputs.model import load_model
    from costmodel.inputs.runtime import load_runtime
    rt = load_runtime(rec.runtime)
    new = {k: v for k, v in rt.scheduler if k not in given and (k != "max_num_batched_tokens" or
                                                                  w.max_num_batched_tokens is None)}
    if new.get("max_num_batched_tokens") == "max_model_len":
        ctx = getattr(load_model(rec.model), "max_context", None) or 8192
        new["max_num_batched_tokens"] = int(max(ctx, 2048))
    if w.max_num_batched_tokens is None and "max_num_batched_tokens" not in new:
        chunk = rt.prefill_chunk_tokens
        new["max_num_batched_tokens"] = int(chunk) if chunk else 8192
    return w.replace(**new) if new else w


def simulate(rec, w: Workload, costs=None):
    """Run one simulation; (result dict, Simulation)."""
    from costmodel.serving.metrics import summarise
    from costmodel.serving.simulator import Simulation
    from costmodel.serving.stepcost import request_alpha
    reqs = generate(w, rec.prompt_len, rec.gen_len, request_alpha(rec))
    if len(reqs.send_s) == 0:
        raise InputError("the workload sends no request (duration_s × request_rate < 1?)", field="duration_s")
    sim = Simulation(rec, w, reqs, costs)
    t = sim.run()
    res = summarise(sim, t)
    res["request_rate"] = w.request_rate if math.isfinite(w.request_rate) else "inf"
    return res, sim


def serve(record, **workload) -> dict:
    """Simulate serving ``record`` (the deployment) under ``workload`` (fields: docs/serving.md,
    :mod:`costmodel.serving.workload`). Returns the metrics of :mod:`costmodel.serving.metrics`."""
    rec, w = split_fields(record, workload)
    res, _ = simulate(rec, w)
    out = {"model": rec.model, "hardware": rec.hardware, "strategy": rec.strategy, "n_devices": rec.n_devices}
    out.update(res)
    return out


def max_rate(record, **workload) -> dict:
    """The highest request_rate whose run meets the SLOs (bisection): ``{"max_request_rate", "at_max"}``."""
    from costmodel.serving.search import max_rate_search
    rec, w = split_fields(record, workload)
    return max_rate_search(rec, w)


def frontier(record, **workload) -> dict:
    """Pareto frontier of tokens/s per device against tokens/s per user over max_num_seqs and tensor
    parallelism (saturated closed loop at each point)."""
    from costmodel.serving.search import pareto_frontier
    rec, w = split_fields(record, workload)
    return pareto_frontier(rec, w)
