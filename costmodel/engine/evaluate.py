"""evaluate(record) -> outputs (docs/design.md, "Outputs"): record → (model, hardware, runtime, strategy) → passes → result.

Step metrics are those of one decoding step at the mean context L = prompt_len + gen_len/2
(every cost is linear in L between regime changes, so the mean step equals the mean over the
generation). Derived outputs:

    tokens_per_s_per_seq    = τ / step_latency_s
    tokens_per_s            = sequences · τ / step_latency_s
    time_per_output_token_s = step_latency_s / τ
    e2e_latency_s           = ttft_s + (gen_len − 1) / τ · step_latency_s
    tokens_per_s_e2e        = sequences · gen_len / e2e_latency_s   (whole-run throughput, prefill included:
                              TensorRT-LLM gptSessionBenchmark, vLLM benchmark_latency)
    speedup_vs_ar           = tokens_per_s_per_seq / (the same for autoregressive decoding of the same sequences)
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np

from costmodel.inputs import dtypes
from costmodel.errors import InputError, again, kept
from costmodel.fast.arrays import broadcast_shape
from costmodel.inputs.hardware import load_hardware
from costmodel.inputs.model import load_model
from costmodel.engine import memory
from costmodel.engine.execution import Exec
from costmodel.inputs.fields import WEIGHTLESS_DRAFTS
from costmodel.inputs.record import Record, parse_record
from costmodel.inputs.runtime import load_runtime
from costmodel.engine.strategies import STRATEGY_FUNCS
from costmodel.engine.roofline import operator_rows
from costmodel.engine.strategies.autoregressive import ar_decode_pass, ar_step
from costmodel.engine.strategies.common import Ctx, Pass

NUMERIC_AXES = ("batch_size", "prompt_len", "gen_len", "gamma", "acceptance_rate", "mean_accepted_tokens",
                "draft_kv_budget", "n_branches", "shared_prefix_len")

OUTPUT_KEYS = ("fits", "step_latency_s", "tokens_per_step", "tokens_per_s_per_seq", "tokens_per_s",
               "time_per_output_token_s", "ttft_s", "e2e_latency_s", "peak_device_memory_bytes", "weights_bytes",
               "kv_cache_bytes", "flops_per_step", "hbm_bytes_per_step", "bound", "speedup_vs_ar",
               "tokens_per_s_e2e")


def build_exec(rec: Record) -> Exec:
    model = load_model(rec.model)
    hw = load_hardware(rec.hardware, rec.power_mode)
    rt = load_runtime(rec.runtime)
    wd = rec.weight_dtype
    if type(wd) is dtypes.WeightDtypes:    # a sweep's stacked dtypes: one signature, checked members
        kd = dtypes.check(rec.kv_dtype or dtypes.default_kv_dtype(wd.members[0]), "kv_dtype")
    else:
        wd = dtypes.check(wd, "weight_dtype")
        kd = dtypes.check(rec.kv_dtype or dtypes.default_kv_dtype(wd), "kv_dtype")
    pp = rec.pipeline_parallel
    tp = rec.tensor_parallel or rec.n_devices // pp
    ep = rec.expert_parallel or 1
    dp = 1
    if ep > 1:
        if not model.n_moe_layers:
            raise InputError(f"expert_parallel needs a mixture-of-experts model; {model.id} is dense",
                             field="expert_parallel", value=ep, allowed="1 for a dense model")
        if model.n_experts % ep:
            raise InputError(f"expert_parallel {ep} does not divide the model's {model.n_experts} routed experts",
                             field="expert_parallel", value=ep,
                             allowed=", ".join(str(d) for d in range(1, model.n_experts + 1)
                                               if model.n_experts % d == 0 and d <= 4096))
        dp = ep // tp
    if np.any(model.n_heads % tp):
        raise InputError(f"tensor_parallel {tp} does not divide the model's {model.n_heads} attention heads",
                         field="tensor_parallel", value=tp,
                         allowed=", ".join(str(d) for d in range(1, model.n_heads + 1) if model.n_heads % d == 0))
    if np.any(model.n_layers % pp):           # (a sweep's stacked models: every member)
        raise InputError(f"pipeline_parallel {pp} does not divide the model's {model.n_layers} layers",
                         field="pipeline_parallel", value=pp)
    return Exec(model=model, hw=hw, rt=rt, weight_dtype=wd, kv_dtype=kd, tp=tp, pp=pp,
                allreduce_algorithm=allreduce_for(rec, rt), ep=ep, dp=dp)


def allreduce_for(rec: Record, rt) -> str:
    """The record's all-reduce algorithm; ``auto`` is the runtime's own (``Runtime.tp_allreduce``)."""
    return rt.tp_allreduce if rec.allreduce_algorithm == "auto" else rec.allreduce_algorithm


def hardware_signature(rec: Record, hw) -> tuple:
    """What the engine decides on (rather than computes with) about ``hw`` for ``rec`` beyond what a
    :class:`~costmodel.inputs.hardware.HardwareStack` decides device by device (the links,
    ``costmodel.engine.parallel``): for fp8 and fp4 weights the device itself (whether it has fp8
    or fp4 units decides the compute dtype, and the note names it). Devices with one signature can
    be priced together as a stack."""
    return (hw.id if _signature_reads_device(rec) else None,)


def hardware_signatures(rec: Record, devices) -> list:
    """:func:`hardware_signature` of ``rec`` for each of ``devices``, read once when it does not read
    the device (every weight dtype but fp8 and fp4)."""
    if _signature_reads_device(rec):
        return [hardware_signature(rec, d) for d in devices]
    return [hardware_signature(rec, devices[0])] * len(devices) if devices else []


def _signature_reads_device(rec: Record) -> bool:
    return rec.weight_dtype == "fp8" or rec.weight_dtype in dtypes.FP4_BLOCK_FORMATS


def build_draft(rec: Record, ex: Exec):
    """The draft's Exec (own weights and KV, one device), the target for ``self``, or None."""
    dm = rec.draft_model
    if rec.strategy not in ("speculative", "tree") or dm in (None, "none", "suffix", "medusa", "eagle", "eagle3"):
        return None
    if dm == "self":
        return ex
    if dm == "mtp":
        if not ex.model.mtp_layers:
            raise InputError(f"{ex.model.id} ships no multi-token-prediction module", field="draft_model",
                             value=dm, allowed="a model with mtp_layers >= 1 (e.g. deepseek-v3), or another draft")
        # the module runs on the target's devices, laid out like the target's layers (last stage)
        return Exec(model=ex.model.mtp_module(), hw=ex.hw, rt=ex.rt, weight_dtype=ex.weight_dtype,
                    kv_dtype=ex.kv_dtype, tp=ex.tp, pp=1, allreduce_algorithm=ex.allreduce_algorithm,
                    ep=ex.ep, dp=ex.dp)
    model = load_model(dm, field="draft_model")
    if np.any(model.vocab_size != ex.model.vocab_size):
        raise InputError(f"the draft's vocabulary ({model.vocab_size} tokens) differs from the target's "
                         f"({ex.model.vocab_size}): its tokens cannot be verified", field="draft_model",
                         value=dm, allowed="a draft with the target's tokenizer")
    dtp = rec.draft_tensor_parallel
    if model.n_heads % dtp:
        raise InputError(f"draft_tensor_parallel {dtp} does not divide the draft's {model.n_heads} attention heads",
                         field="draft_tensor_parallel", value=dtp,
                         allowed=", ".join(str(d) for d in range(1, model.n_heads + 1) if model.n_heads % d == 0))
    fewest = int(np.min(rec.n_devices))        # a stacked sweep may carry several device counts
    if rec.draft_placement == "same_device" and dtp > fewest:
        raise InputError(f"draft_tensor_parallel {dtp} exceeds the {fewest} device(s) the draft shares "
                         "with the target", field="draft_tensor_parallel", value=dtp,
                         allowed=f"1..n_devices = 1..{fewest}, or draft_placement=separate_device")
    return Exec(model=model, hw=ex.hw, rt=ex.rt, weight_dtype=ex.weight_dtype, kv_dtype=ex.kv_dtype, tp=dtp, pp=1,
                allreduce_algorithm=allreduce_for(rec, ex.rt) if dtp > 1 else "auto")


#: the record fields that decide build_exec / build_draft (all but the numeric axes)
_EXEC_FIELDS = tuple(f.name for f in dataclasses.fields(Record) if f.name not in NUMERIC_AXES)
_exec_key = operator.attrgetter(*_EXEC_FIELDS)      # the tuple of those fields' values
_EXEC_CACHE: dict = {}
#: (the last record asked about, its Execs): a stacked record (devices or dtypes as arrays) is not
#: hashable, and an evaluation asks about its record a few dozen times
_EXEC_LAST: list = [(None, None)]


def _execs(rec: Record):
    """(build_exec(rec), build_draft(rec, ·)), cached on the fields that decide them: Exec is
    immutable and the spec loaders already cache by path, so this only skips the id resolution.
    Their InputError is cached alike and raised again as a copy (a sweep marks a refused group's
    rows device by device, each device asking again)."""
    hit = _execs_or_refusal(rec)
    if isinstance(hit, InputError):
        raise again(hit)
    return hit


def execs_refusal(rec: Record) -> InputError | None:
    """The InputError :func:`_execs` raises for ``rec`` (the cached one: read it, never raise it), or
    None when its Execs build; asked without raising (a sweep's plan asks once per refused device)."""
    try:
        hit = _execs_or_refusal(rec)
    except InputError as exc:            # not kept (a spec file that does not load)
        return exc
    return hit if isinstance(hit, InputError) else None


def _execs_or_refusal(rec: Record):
    """_execs' (Exec, draft Exec), or the kept InputError that refuses them."""
    last = _EXEC_LAST[0]
    if last[0] is rec:                   # the record the evaluation in progress asked about (frozen)
        return last[1]
    key = _exec_key(rec)
    try:
        hit = _EXEC_CACHE.get(key)
    except TypeError:                    # a field holds an unhashable object (e.g. a HardwareStack)
        from costmodel.engine.pass_memo import shared_exec
        ex = shared_exec(build_exec(rec))   # within a sweep, an equal Exec built before: its figures kept
        hit = (ex, shared_exec(build_draft(rec, ex)))
        _EXEC_LAST[0] = (rec, hit)
        return hit
    if hit is None:
        try:
            ex = build_exec(rec)
            hit = (ex, build_draft(rec, ex))
        except InputError as exc:
            if not _specs_load(rec):        # a spec file may be fixed and asked for again: not kept
                raise
            hit = kept(exc)                 # a refusal of specs that load is as fixed as an Exec
        if len(_EXEC_CACHE) >= 1024:
            _EXEC_CACHE.clear()
        _EXEC_CACHE[key] = hit
    if not isinstance(hit, InputError):
        _EXEC_LAST[0] = (rec, hit)
    return hit


def _specs_load(rec: Record) -> bool:
    """Whether the record's model, device, runtime and named draft all load (the loaders' caches)."""
    try:
        load_model(rec.model)
        load_hardware(rec.hardware, rec.power_mode)
        load_runtime(rec.runtime)
        if rec.draft_model not in WEIGHTLESS_DRAFTS and rec.draft_model not in ("none", "self", "mtp"):
            load_model(rec.draft_model, field="draft_model")
    except Exception:          # noqa: BLE001 - any failure to load: the refusal is not cached
        return False
    return True


def check_context(rec: Record, model, arrays: dict | None = None) -> None:
    """A context beyond the model's max_context is an input error: the longest context a sequence
    reaches is prompt_len + gen_len (every element of a sweep; a shared-prefix branch's context is its
    prompt, which holds the shared prefix, plus its own generated tokens: the same sum). Only the
    target is checked: a draft shorter than the target is the runtime's business (vLLM stops
    speculating past the draft's length)."""
    if model.max_context is None:
        return
    a = arrays or {}
    total = np.max(np.asarray(a.get("prompt_len", rec.prompt_len), dtype=float)
                   + np.asarray(a.get("gen_len", rec.gen_len), dtype=float))
    if total > model.max_context:
        raise InputError(f"prompt_len + gen_len = {total:.0f} exceeds {model.id}'s max_context {model.max_context}",
                         field="prompt_len",
                         allowed=f"prompt_len + gen_len <= max_context = {model.max_context}")


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


def _outcome(rec: Record, arrays: dict | None = None, check_limits: bool = True):
    """(Ctx, Outcome) of the record's strategy; with ``check_limits`` a context beyond the model's
    max_context is refused (:func:`check_context`; a sweep checks its grid itself and marks rows)."""
    ex, draft = _execs(rec)
    if check_limits:
        check_context(rec, ex.model, arrays)
    ctx = make_ctx(rec, ex, arrays)
    func = STRATEGY_FUNCS[rec.strategy]
    if rec.gamma_schedule is not None:           # speculation with γ by batch size
        from costmodel.engine.scheduled import scheduled_outcome
        return ctx, scheduled_outcome(ctx, lambda c: func(c, draft), STRATEGY_FUNCS["autoregressive"])
    return ctx, (func(ctx) if rec.strategy in ("autoregressive", "shared_prefix") else func(ctx, draft))


def baseline_batch(ctx: Ctx):
    """Sequences of the autoregressive baseline: the B·n branches of a shared-prefix record decoded
    independently, else the record's batch."""
    return ctx.B * ctx.n_branches if ctx.rec.strategy == "shared_prefix" else ctx.B


def evaluate_passes(record) -> dict:
    """The passes :func:`evaluate` priced for ``record`` (mapping or :class:`Record`), by name, each a
    :class:`~costmodel.engine.strategies.common.Pass` (Cost with per-operator rows, and the Exec that
    ran it): ``prefill`` (the target's prompt processing, chunked as the runtime chunks it, per-step
    overhead included), ``draft_prefill`` (a draft model's), ``decode`` (the one pass of an
    autoregressive or shared-prefix step), ``draft`` (all draft passes of one step: γ chain passes, or
    one per tree level), ``verify``, and ``ar_decode`` (the autoregressive baseline's pass behind
    ``speedup_vs_ar``). Step overheads and draft-link transfers are not passes."""
    rec = record if isinstance(record, Record) else parse_record(record)
    with operator_rows(True):
        ctx, out = _outcome(rec)
        passes = dict(out.passes)
        if rec.strategy != "autoregressive":
            passes["ar_decode"] = Pass(ar_decode_pass(ctx, B=baseline_batch(ctx)), ctx.ex)
        else:
            passes["ar_decode"] = passes["decode"]
    return passes


def evaluate_arrays(rec: Record, arrays: dict | None = None, with_baseline: bool = True,
                    bound_codes: bool = False, check_limits: bool = True) -> dict:
    """Vectorised core: ``rec`` fixes the model, hardware and strategy; ``arrays`` maps any of
    NUMERIC_AXES to numpy arrays that broadcast together. Returns a dict of arrays. With
    ``bound_codes`` the ``bound`` and ``prefill_bound`` arrays hold int8 indices into
    ``roofline.BOUNDS`` instead of the names (the sweep turns them into text once per column). With
    ``check_limits`` False a context beyond max_context is priced (a sweep has checked its grid)."""
    ctx, out = _outcome(rec, arrays, check_limits)
    res = finalize(ctx, out, bound_codes)
    if rec.strategy == "autoregressive":
        res["speedup_vs_ar"] = np.broadcast_to(np.float64(1.0), np.shape(res["step_latency_s"]))
    elif with_baseline:
        # only the baseline's step is needed: tokens_per_s_per_seq of AR decoding is 1 / step time
        base_lat = ar_step(ctx, B=baseline_batch(ctx)).time_s
        shape = broadcast_shape(np.shape(base_lat), np.shape(res["step_latency_s"]))
        res["speedup_vs_ar"] = res["tokens_per_s_per_seq"] / (1.0 / base_lat)
        if rec.gamma_schedule is not None:      # rows where the schedule decodes plainly: the baseline itself
            from costmodel.engine.scheduled import off_mask
            res["speedup_vs_ar"] = np.where(off_mask(rec, ctx.B), 1.0, res["speedup_vs_ar"])
        res["ar_step_latency_s"] = np.broadcast_to(base_lat, shape)
    return res


def _bc(a, shape):
    """np.broadcast_to(a, shape), or ``a`` itself when it is a numpy value of that shape already."""
    if isinstance(a, (np.ndarray, np.generic)) and np.shape(a) == shape:
        return a
    return np.broadcast_to(a, shape)


def finalize(ctx: Ctx, out, bound_codes: bool = False) -> dict:
    ex, fp = ctx.ex, out.memory
    step = out.step
    lat = step.time_s
    # the broadcast shape of every input array (an output may vary along an axis the step time
    # does not, e.g. tokens per step along acceptance_rate)
    shape = broadcast_shape(np.shape(lat), np.shape(out.tokens_per_step), np.shape(out.n_seqs),
                                np.shape(ctx.G), np.shape(out.prefill.time_s), np.shape(fp.kv_total_bytes),
                                *(np.shape(v) for v in fp.device.values()),
                                *(np.shape(v) for v in (fp.other_device or {}).values()),
                                *(np.shape(v) for v in out.extras.values() if not isinstance(v, list)))
    if np.shape(lat) != shape:
        lat = _bc(lat, shape)
    # float views, not copies (np.asarray copies only what is not float64 already); tps_c, the
    # unbroadcast τ, gives the same elementwise quotients without a full-size pass
    tps_c = np.asarray(out.tokens_per_step, dtype=float)
    tps = _bc(tps_c, shape)
    seqs_c = np.asarray(out.n_seqs, dtype=float)
    seqs = _bc(seqs_c, shape)
    mem_t = {k: _bc(np.asarray(v, dtype=float), shape) for k, v in fp.device.items()}
    other = fp.other_device and {k: _bc(np.asarray(v, dtype=float), shape) for k, v in fp.other_device.items()}
    peak = memory.peak_device_bytes(mem_t, other)
    ttft = out.prefill.time_s
    seq_tokens = seqs_c * tps_c          # tokens per step over all sequences (unbroadcast; used thrice)
    res = {
        "fits": peak <= ex.hw.usable_bytes,
        "step_latency_s": lat,
        "tokens_per_step": tps,
        "tokens_per_s_per_seq": tps_c / lat,
        "tokens_per_s": seq_tokens / lat,
        "time_per_output_token_s": lat / tps_c,
        "ttft_s": _bc(ttft, shape),
        "e2e_latency_s": ttft + (ctx.G - 1.0) / tps_c * lat,   # G, τ unbroadcast: same values
        "peak_device_memory_bytes": peak,
        "usable_memory_bytes": _bc(ex.hw.usable_bytes, shape),
        "weights_bytes": _bc(np.asarray(fp.weights_total_bytes, dtype=float), shape),
        "kv_cache_bytes": np.asarray(_bc(fp.kv_total_bytes, shape), dtype=float),
        "kv_bytes_per_token": _bc(ex.model.kv_bytes_per_token(ex.kv_elem_bytes), shape),
        "flops_per_step": step.flops,
        "hbm_bytes_per_step": step.hbm_bytes,
        "flops_per_token": step.flops / seq_tokens,
        "hbm_bytes_per_token": step.hbm_bytes / seq_tokens,
        "arithmetic_intensity": step.flops / np.maximum(step.hbm_bytes, 1.0),
        "bound": step.bound_index() if bound_codes else step.bound(),
        "prefill_bound": _bc(out.prefill.bound_index() if bound_codes else out.prefill.bound(), shape),
        "n_sequences": seqs,
    }
    res["tokens_per_s_e2e"] = seqs * ctx.G / res["e2e_latency_s"]
    for b, v in step.by_bound.items():
        res[f"time_{b}_s"] = _bc(v, shape)
    for k, v in mem_t.items():
        res[f"memory_{k}_bytes"] = v
    for k, v in out.extras.items():
        if isinstance(v, list):
            continue
        res[k] = _bc(np.asarray(v, dtype=float), shape)
    res["_extras"] = out.extras
    res["_step_ops"] = step.ops
    return res


def assumption_notes(rec: Record, ex: Exec) -> list:
    """What the model assumed on the user's behalf, one short sentence each (output ``notes``)."""
    notes = []
    hw_id = rec.hardware if isinstance(rec.hardware, str) else ex.hw.id
    if ex.weight_dtype == "fp8" and ex.compute_dtype != "fp8":
        notes.append(f"fp8 weights run weight-only on {ex.compute_dtype} tensor cores on {hw_id}")
    if ex.weight_dtype in dtypes.FP4_BLOCK_FORMATS and ex.compute_dtype != "fp4":
        notes.append(f"{ex.weight_dtype} weights run weight-only on {ex.compute_dtype} tensor cores on {hw_id} "
                     "(no fp4 units)")
    if rec.kv_dtype is None and ex.kv_dtype != ex.weight_dtype:
        notes.append(f"kv_dtype defaults to the activation dtype: {ex.kv_dtype}")
    if rec.strategy in ("speculative", "tree"):
        notes.extend(draft_notes(rec, ex))
    if rec.gamma_schedule is not None:
        from costmodel.engine.scheduled import schedule_note
        notes.append(schedule_note(rec))
    return notes


def draft_notes(rec: Record, ex: Exec) -> list:
    """What a speculative record's draft kind assumed (suffix: CPU time unpriced; eagle3: its vocabulary)."""
    notes = []
    if rec.draft_model == "suffix":
        notes.append("suffix drafts on the CPU: no GPU draft passes; the suffix-tree lookup time is not priced "
                     "(no published per-step figure), and verification carries gamma (the most tokens a suffix "
                     "draft may propose) + 1 tokens")
    if rec.draft_model == "eagle3" and rec.draft_vocab_size is None:
        from costmodel.engine.strategies.heads import eagle3_vocab
        notes.append(f"the eagle3 head's LM head covers {eagle3_vocab(ex.model)} tokens (the released EAGLE-3 "
                     "heads' draft vocabulary; set draft_vocab_size)")
    return notes


def _scalar(v):
    a = np.asarray(v)
    if a.dtype == object or a.dtype.kind in "US":
        return str(a.ravel()[0])
    if a.dtype == bool:
        return bool(a.ravel()[0])
    x = float(a.ravel()[0])
    return x


def record_head(rec: Record) -> dict:
    """The outputs that name the configuration, first in :func:`evaluate`'s dict."""
    return {"model": rec.model, "hardware": rec.hardware, "strategy": rec.strategy}


def record_tail(rec: Record, extras: dict, ex: Exec | None = None) -> dict:
    """The record-level outputs after the arrays in :func:`evaluate`'s dict: ``n_devices``, ``notes``,
    ``n_devices_total`` (a draft on its own device), ``tree_parents`` (from the strategy's extras).
    ``ex``: the record's Exec when the caller holds it (``build_exec(rec)``'s equal)."""
    out = {"n_devices": rec.n_devices, "notes": assumption_notes(rec, _execs(rec)[0] if ex is None else ex)}
    if rec.draft_placement != "same_device" and rec.strategy in ("speculative", "tree") and \
            rec.draft_model not in WEIGHTLESS_DRAFTS:
        out["n_devices_total"] = rec.n_devices + rec.draft_tensor_parallel
    if "tree_parents" in extras:
        out["tree_parents"] = extras["tree_parents"]
    return out


def evaluate(record, *, details: bool = False) -> dict:
    """Evaluate one record (mapping, ``KEY=VALUE`` dict or :class:`Record`) -> output dict.

    Keys: the outputs of docs/design.md (``OUTPUT_KEYS``) plus breakdowns (``memory_*_bytes``, ``time_*_s``,
    ``flops_per_token``, ``arithmetic_intensity``, …). With ``details=True`` also ``operators``:
    per-operator FLOPs, bytes, seconds and bound of one decoding step.
    """
    rec = parse_record(record)
    res = evaluate_arrays(rec)
    extras = res.pop("_extras")
    ops = res.pop("_step_ops")
    out = record_head(rec)
    out.update({k: _scalar(v) for k, v in res.items()})
    out.update(record_tail(rec, extras))
    if details:
        out["operators"] = [{"name": n, "flops": _scalar(f), "hbm_bytes": _scalar(h), "time_s": _scalar(t),
                             "bound": _scalar(b)} for n, f, h, t, b in ops]
    return out
