"""evaluate(record) -> outputs (DESIGN §4): record → (model, hardware, runtime, strategy) → passes → result.

Step metrics are those of one decoding step at the mean context L = prompt_len + gen_len/2
(every cost is linear in L between regime changes, so the mean step equals the mean over the
generation). Derived outputs:

    tokens_per_s_per_seq    = τ / step_latency_s
    tokens_per_s            = sequences · τ / step_latency_s
    time_per_output_token_s = step_latency_s / τ
    e2e_latency_s           = ttft_s + (gen_len − 1) / τ · step_latency_s
    speedup_vs_ar           = tokens_per_s_per_seq / (the same for autoregressive decoding of the same sequences)
"""

from __future__ import annotations

import numpy as np

from . import dtypes
from .errors import InputError
from .hardware import load_hardware
from .model import load_model
from .ops import Exec
from .record import DRAFT_KINDS, Record, parse_record
from .runtime import load_runtime
from .strategies import STRATEGY_FUNCS
from .strategies.autoregressive import autoregressive
from .strategies.common import Ctx

NUMERIC_AXES = ("batch_size", "prompt_len", "gen_len", "gamma", "acceptance_rate", "mean_accepted_tokens",
                "draft_kv_budget", "n_branches", "shared_prefix_len")

OUTPUT_KEYS = ("fits", "step_latency_s", "tokens_per_step", "tokens_per_s_per_seq", "tokens_per_s",
               "time_per_output_token_s", "ttft_s", "e2e_latency_s", "peak_device_memory_bytes", "weights_bytes",
               "kv_cache_bytes", "flops_per_step", "hbm_bytes_per_step", "bound", "speedup_vs_ar")


def build_exec(rec: Record) -> Exec:
    model = load_model(rec.model)
    hw = load_hardware(rec.hardware, rec.power_mode)
    rt = load_runtime(rec.runtime)
    wd = dtypes.check(rec.weight_dtype, "weight_dtype")
    kd = dtypes.check(rec.kv_dtype or ("fp16" if wd in ("int8", "int4") else wd), "kv_dtype")
    pp = rec.pipeline_parallel
    tp = rec.tensor_parallel or rec.n_devices // pp
    if model.n_heads % tp:
        raise InputError(f"tensor_parallel {tp} does not divide the model's {model.n_heads} attention heads",
                         field="tensor_parallel", value=tp,
                         allowed=", ".join(str(d) for d in range(1, model.n_heads + 1) if model.n_heads % d == 0))
    if model.n_layers % pp:
        raise InputError(f"pipeline_parallel {pp} does not divide the model's {model.n_layers} layers",
                         field="pipeline_parallel", value=pp)
    return Exec(model=model, hw=hw, rt=rt, weight_dtype=wd, kv_dtype=kd, tp=tp, pp=pp,
                allreduce_algorithm=rec.allreduce_algorithm)


def build_draft(rec: Record, ex: Exec):
    """The draft's Exec (own weights and KV, one device), the target for ``self``, or None."""
    dm = rec.draft_model
    if rec.strategy not in ("speculative", "tree") or dm in (None, "none", "medusa", "eagle"):
        return None
    if dm == "self":
        return ex
    model = load_model(dm, field="draft_model")
    return Exec(model=model, hw=ex.hw, rt=ex.rt, weight_dtype=ex.weight_dtype, kv_dtype=ex.kv_dtype, tp=1, pp=1)


def make_ctx(rec: Record, ex: Exec, arrays: dict | None = None) -> Ctx:
    a = dict(arrays or {})

    def get(name, default=None):
        if name in a:
            return np.asarray(a[name], dtype=float)
        v = getattr(rec, name)
        return default if v is None else np.asarray(float(v))

    return Ctx(rec=rec, ex=ex, B=get("batch_size"), P=get("prompt_len"), G=get("gen_len"), gamma=get("gamma"),
               alpha=get("acceptance_rate"), tau=get("mean_accepted_tokens"), draft_kv_budget=get("draft_kv_budget"),
               n_branches=get("n_branches"), shared_prefix_len=get("shared_prefix_len"))


def evaluate_arrays(rec: Record, arrays: dict | None = None, with_baseline: bool = True) -> dict:
    """Vectorised core: ``rec`` fixes the model, hardware and strategy; ``arrays`` maps any of
    NUMERIC_AXES to numpy arrays that broadcast together. Returns a dict of arrays."""
    ex = build_exec(rec)
    draft = build_draft(rec, ex)
    ctx = make_ctx(rec, ex, arrays)
    func = STRATEGY_FUNCS[rec.strategy]
    out = func(ctx) if rec.strategy in ("autoregressive", "shared_prefix") else func(ctx, draft)
    res = finalize(ctx, out)
    if rec.strategy == "autoregressive":
        res["speedup_vs_ar"] = np.ones_like(res["step_latency_s"])
    elif with_baseline:
        B = ctx.B * ctx.n_branches if rec.strategy == "shared_prefix" else ctx.B
        base = finalize(ctx, autoregressive(ctx, B=B))
        res["speedup_vs_ar"] = res["tokens_per_s_per_seq"] / base["tokens_per_s_per_seq"]
        res["ar_step_latency_s"] = base["step_latency_s"]
    return res


def finalize(ctx: Ctx, out) -> dict:
    ex = ctx.ex
    step = out.step
    lat = step.time_s
    # the broadcast shape of every input array (an output may vary along an axis the step time
    # does not, e.g. tokens per step along acceptance_rate)
    shape = np.broadcast_shapes(np.shape(lat), np.shape(out.tokens_per_step), np.shape(out.n_seqs),
                                np.shape(ctx.G), np.shape(out.prefill.time_s), np.shape(out.kv_total_bytes),
                                *(np.shape(v) for v in out.memory.values()),
                                *(np.shape(v) for v in (out.other_device_memory or {}).values()),
                                *(np.shape(v) for v in out.extras.values() if not isinstance(v, list)))
    if np.shape(lat) != shape:
        lat = np.broadcast_to(lat, shape)
    tps = np.broadcast_to(out.tokens_per_step, shape).astype(float)
    seqs = np.broadcast_to(out.n_seqs, shape).astype(float)
    mem_t = {k: np.broadcast_to(np.asarray(v, dtype=float), shape) for k, v in out.memory.items()}
    peak = sum(mem_t.values())
    if out.other_device_memory:
        other = sum(np.broadcast_to(np.asarray(v, dtype=float), shape) for v in out.other_device_memory.values())
        peak = np.maximum(peak, other)
    ttft = out.prefill.time_s
    gen = np.broadcast_to(ctx.G, shape)
    res = {
        "fits": peak <= ex.hw.usable_bytes,
        "step_latency_s": lat,
        "tokens_per_step": tps,
        "tokens_per_s_per_seq": tps / lat,
        "tokens_per_s": seqs * tps / lat,
        "time_per_output_token_s": lat / tps,
        "ttft_s": np.broadcast_to(ttft, shape),
        "e2e_latency_s": ttft + (gen - 1.0) / tps * lat,
        "peak_device_memory_bytes": peak,
        "usable_memory_bytes": np.broadcast_to(ex.hw.usable_bytes, shape),
        "weights_bytes": np.broadcast_to(out.weights_total_bytes, shape).astype(float),
        "kv_cache_bytes": np.broadcast_to(out.kv_total_bytes, shape).astype(float),
        "kv_bytes_per_token": np.broadcast_to(ex.model.kv_bytes_per_token(ex.kv_elem_bytes), shape),
        "flops_per_step": step.flops,
        "hbm_bytes_per_step": step.hbm_bytes,
        "flops_per_token": step.flops / (seqs * tps),
        "hbm_bytes_per_token": step.hbm_bytes / (seqs * tps),
        "arithmetic_intensity": step.flops / np.maximum(step.hbm_bytes, 1.0),
        "bound": step.bound(),
        "prefill_bound": np.broadcast_to(out.prefill.bound(), shape),
        "n_sequences": seqs,
    }
    for b, v in step.by_bound.items():
        res[f"time_{b}_s"] = np.broadcast_to(v, shape)
    for k, v in mem_t.items():
        res[f"memory_{k}_bytes"] = v
    for k, v in out.extras.items():
        if isinstance(v, list):
            continue
        res[k] = np.broadcast_to(np.asarray(v, dtype=float), shape)
    res["_extras"] = out.extras
    res["_step_ops"] = step.ops
    return res


def _scalar(v):
    a = np.asarray(v)
    if a.dtype == object or a.dtype.kind in "US":
        return str(a.ravel()[0])
    if a.dtype == bool:
        return bool(a.ravel()[0])
    x = float(a.ravel()[0])
    return x


def evaluate(record, *, details: bool = False) -> dict:
    """Evaluate one record (mapping, ``KEY=VALUE`` dict or :class:`Record`) -> output dict.

    Keys: DESIGN §4 outputs (``OUTPUT_KEYS``) plus breakdowns (``memory_*_bytes``, ``time_*_s``,
    ``flops_per_token``, ``arithmetic_intensity``, …). With ``details=True`` also ``operators``:
    per-operator FLOPs, bytes, seconds and bound of one decoding step.
    """
    rec = parse_record(record)
    res = evaluate_arrays(rec)
    extras = res.pop("_extras")
    ops = res.pop("_step_ops")
    out = {"model": rec.model, "hardware": rec.hardware, "strategy": rec.strategy}
    out.update({k: _scalar(v) for k, v in res.items()})
    out["n_devices"] = rec.n_devices
    if rec.draft_placement != "same_device" and rec.strategy in ("speculative", "tree") and \
            rec.draft_model not in ("none", "medusa", "self"):
        out["n_devices_total"] = rec.n_devices + 1
    if "tree_parents" in extras:
        out["tree_parents"] = extras["tree_parents"]
    if details:
        out["operators"] = [{"name": n, "flops": _scalar(f), "hbm_bytes": _scalar(h), "time_s": _scalar(t),
                             "bound": _scalar(b)} for n, f, h, t, b in ops]
    return out
