"""Why a strategy wins: the one-line reason ``recommend`` gives on one device.

The reason names the binding resource of an autoregressive step, read from the engine's priced
decoding pass (``pass_shares``: which share of the HBM traffic is weight GEMMs and which is
attention over the KV cache, and the GEMMs' FLOPs per byte against the device's ridge), then what
the winner does with it; ``draft_sentence`` adds when the draft, not the target, binds.
"""

from __future__ import annotations

import numpy as np

from costmodel.engine.evaluate import build_exec
from costmodel.analysis.recommend_variants import record_on

def fmt_bytes(b: float) -> str:
    """Bytes for a sentence: GB with one decimal from 0.1 GB, else whole MB."""
    return f"{b / 1e9:.1f} GB" if b >= 1e8 else f"{b / 1e6:.0f} MB"


def _ridge(fields: dict, hw) -> float:
    ex = build_exec(record_on(dict(fields, strategy="autoregressive"), hw))
    return ex.matrix_flops_per_s / ex.hbm_bytes_per_s


#: the operators of a pass that multiply by weight matrices (costmodel.engine.ops.layer_ops)
WEIGHT_GEMMS = ("qkv_proj", "o_proj", "ffn", "moe_ffn", "router", "lm_head")


def pass_shares(cost) -> dict:
    """What a pass's HBM traffic is made of, from the engine's per-operator rows: ``weight_gemms``
    and ``attention`` (the KV cache read and written, q and o) as shares of the pass's bytes, and
    ``gemm_intensity``, the weight GEMMs' FLOPs per byte."""
    rows = [(name, float(np.ravel(f)[0]), float(np.ravel(h)[0])) for name, f, h, _t, _b in cost.ops]
    total = sum(h for _, _, h in rows)
    g_fl = sum(f for n, f, _ in rows if n in WEIGHT_GEMMS)
    g_hb = sum(h for n, _, h in rows if n in WEIGHT_GEMMS)
    att = sum(h for n, _, h in rows if n == "attention")
    nan = float("nan")
    return {"weight_gemms": g_hb / total if total else nan, "attention": att / total if total else nan,
            "gemm_intensity": g_fl / g_hb if g_hb else nan}


def explain(fields: dict, hw, best: str, cands: dict, ar_pass) -> str:
    """One line on why ``best`` wins, in terms of the binding resource of an AR step (``ar_pass``: the
    autoregressive candidate's decoding pass as the engine priced it, with its operator rows)."""
    B = int(float(fields.get("batch_size", 1)))
    n_br = int(float(fields.get("n_branches") or 1))
    seqs = B * n_br
    ar = cands["autoregressive"]
    bound = ar.get("bound", "memory")
    ai = ar.get("arithmetic_intensity", float("nan"))
    ridge = _ridge(fields, hw)
    moved = ar.get("hbm_bytes_per_step", float("nan"))
    share = pass_shares(ar_pass)
    where = f"batch {B}" + (f" × {n_br} branches" if n_br > 1 else "")
    if bound == "memory":
        n_dev = int(float(fields.get("n_devices") or 1))
        head = (f"memory-bound at {where}: an AR step moves {fmt_bytes(moved)} in total ("
                + (f"{fmt_bytes(moved / n_dev)} per device; " if n_dev > 1 else "")
                + f"{share['weight_gemms']:.0%} of it weight GEMMs, {share['attention']:.0%} attention over the KV "
                f"cache) at {ai:.0f} FLOP/B, below the device's ridge of {ridge:.0f} FLOP/B")
    elif bound == "compute":
        head = (f"compute-bound at {where}: the weight GEMMs of an AR step already run at about "
                f"{share['gemm_intensity']:.0f} FLOP/B ({seqs} tokens per weight read), above the device's ridge "
                f"of {ridge:.0f} FLOP/B")
    elif bound == "launch":
        head = f"launch-bound at {where}: an AR step is dominated by kernel launches and host overhead"
    else:
        head = f"{bound}-bound at {where}"
    b = cands[best]
    if best == "autoregressive":
        alt = max((k for k in cands if k != "autoregressive"), key=lambda k: cands[k].get("ratio_to_best", 0),
                  default=None)
        if alt is None:
            return head + "; no other strategy fits"
        a = cands[alt]
        if not a.get("fits", True):
            return head + f"; {alt} does not fit in memory"
        cost = a["step_latency_s"] / ar["step_latency_s"]
        why = ("verifying extra tokens multiplies the FLOPs of a step that has no spare compute"
               if bound == "compute" else "the extra tokens per step do not pay for the draft and verification")
        return (head + f"; {why}: the best {alt} ({_cfg_text(a['config'])}) costs {cost:.2f}× an AR step "
                f"for {a['tokens_per_step']:.2f} tokens → {fmt_ratio(a['speedup_vs_ar'])}× AR")
    if best == "shared_prefix":
        kv = cands["shared_prefix"]
        return (head + f"; the shared prefix is stored and read once for the {n_br} branches of each prompt: "
                f"a step moves {fmt_bytes(kv['hbm_bytes_per_step'])} instead of {fmt_bytes(moved)} for "
                f"{seqs} independent sequences → {kv['tokens_per_s'] / ar['tokens_per_s']:.2f}× AR")
    cost = b["step_latency_s"] / ar["step_latency_s"]
    q = b["config"].get("tree_nodes", b["config"].get("gamma", 0)) + 1
    what = "verification of" if best == "speculative" else "verifying a tree of"
    how = ("is nearly free there" if bound != "compute" else
           "is paid almost in full here, but the step's fixed costs (launches, host overhead, weight reads) "
           "are shared by more tokens")
    return (head + f"; {what} {q} tokens {how}: a step of {best} ({_cfg_text(b['config'])}) "
            f"costs {cost:.2f}× an AR step (draft included) and yields {b['tokens_per_step']:.2f} tokens per sequence "
            f"→ {fmt_ratio(b['speedup_vs_ar'])}× AR")


def draft_sentence(cands: dict, best: str) -> str:
    """"; the draft binds …" when the best speculative or tree candidate (or, when plain decoding wins,
    the best of them) spends more than half of its step in draft passes."""
    from costmodel.analysis.plan import DRAFT_BOTTLENECK_SHARE
    name = best if best in ("speculative", "tree") else max(
        (k for k in ("speculative", "tree") if k in cands), key=lambda k: cands[k].get("ratio_to_best", 0), default=None)
    c = cands.get(name) if name else None
    if not c or not c.get("step_latency_s") or c.get("draft_time_per_step_s", 0.0) <= \
            DRAFT_BOTTLENECK_SHARE * c["step_latency_s"]:
        return ""
    dtp = c["config"].get("draft_tensor_parallel", 1)
    return (f"; the draft binds {name}: its passes take {c['draft_time_per_step_s'] * 1e3:.3g} ms of the "
            f"{c['step_latency_s'] * 1e3:.3g} ms step on {dtp} device(s)"
            + ("" if dtp > 1 else " (draft_tensor_parallel shards a draft model over the target's devices)"))


def _cfg_text(cfg: dict) -> str:
    """A configuration as ``key=value, ...`` (lists, the values tried, left out)."""
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if not isinstance(v, list))


def fmt_ratio(x: float) -> str:
    """A ratio: two decimals, three when two would round a small loss or gain to 1.00."""
    return f"{x:.3f}" if 0.995 <= x < 1.005 and x != 1.0 else f"{x:.2f}"
