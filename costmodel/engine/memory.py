"""Memory: what the most loaded device holds, whether it fits, and the totals over all devices.

A strategy says what it stores (KV tokens of the target and of the draft, the passes it runs, where
the draft sits); this module turns that into bytes. Per device of a tensor-parallel group of ``tp``
and a pipeline of ``pp`` stages (``ex``: :class:`costmodel.engine.execution.Exec`):

    target weights   = (whole-model weights + replicated K/V projections) / (tp·pp)   weights_device_bytes
                       (expert parallel: routed experts / (ep·pp), the rest / (tp·pp))
    KV bytes/token   = 2 · layers/pp · ceil(kv_heads/tp) · head_dim · kv_bytes          kv_bytes_per_token_device
                       (MLA: (kv_lora + rope) · layers/pp · kv_bytes on every rank)
    target KV        = KV tokens stored · KV bytes/token (windowed layers: ≤ seqs·window) kv_bytes
                       (attention data parallel: the device's group holds 1/dp of the tokens)
    tree scratch     = B · q · KV bytes/token (q = tree nodes + root: the verified slots) tree_scratch_bytes
    draft weights    = a draft model's own weights/device; 0 for ``self`` (the target's weights);
                       a head's parameters · bytes per weight / tp (Medusa, EAGLE)         draft_breakdown
    draft KV         = the draft's KV tokens · its KV bytes/token                         draft_breakdown
    activations      = the largest pass of T tokens, L of them needing logits (k experts per token):
                       T·(2·d + (q + 2·kv)/tp + q/tp + 3·k·d_ff/tp)·act_bytes + L·vocab/tp·4 activation_bytes
    attention scores = an unfused kernel's fp32 scores of one layer: 4 · heads/tp · score pairs
                       (0 with a fused kernel)                                             score_bytes
    runtime overhead = Runtime.memory_overhead_bytes (CUDA context, workspaces, pools)

    peak = Σ of the target device's parts, or the draft device's Σ when a separate draft device
           holds more (draft weights, draft KV, [activations,] runtime overhead)       peak_device_bytes
    fits = peak ≤ the device's usable bytes

Totals over all devices: weights = whole-model weights + the draft's weights over its devices (a
draft model sharded over ``draft_tensor_parallel`` devices: its per-device weights · its tp·pp; a head
on the target's tp group: its parameters once, plus the copies of any matrix every rank replicates);
KV cache = (target KV + tree scratch) · tp·pp + draft KV per device · the draft's tp·pp (:func:`footprint`,
:class:`DraftParts`: per-device and total figures are never mixed).
The prefill's pass holds B·P tokens, or P when the runtime prefills one prompt at a time
(``prefill_per_sequence``); a runtime that chunks prefill (``prefill_chunk_tokens`` = C) never runs
more than C tokens in a pass, so activations and scores are those of a C-token slice (:func:`target_breakdown`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.engine.execution import Exec
from costmodel.fast.arrays import add_all


# --------------------------------------------------------------------------- weights
def weights_total_bytes(ex: Exec) -> float:
    """Weights of the whole model (all devices, no TP replication): decoder matrices in the quantised
    format (scale bytes per matrix at its own d_in), norms in the activation dtype when quantised,
    token embedding and (untied) LM head in their own formats (``Exec.embedding_w_bytes``,
    ``Exec.lm_head_w_bytes``). Equals n_params · bytes per element for unquantised dtypes.
    Dense-FFN and MoE layers are summed per kind (``Model.n_dense_layers``, ``Model.n_moe_layers``)."""
    if ex.dtype_members:                  # stacked weight dtypes: each member's own sum, kept (read-only)
        got = ex.__dict__.get("_weights_total_bytes")
        if got is None:
            got = ex.per_weight_dtype(weights_total_bytes)
            if isinstance(got, np.ndarray):
                got.flags.writeable = False
            ex.__dict__["_weights_total_bytes"] = got
        return got
    m = ex.model
    if not ex.quantised:
        return m.n_params * ex.w_bytes
    d, o = m.d_model, m.o_dim

    def layer(n_mats, width, router):
        """One layer: attention (o_proj at d_in = heads·v), n_mats FFN matrices of d×width (the down
        projection at d_in = width), the router, norms in the activation dtype."""
        ff = n_mats * ((3 if m.ffn_type == "gated" else 2) * d * width)
        down = n_mats * d * width
        return ((m.attn_params_per_layer - o * d + router) * ex.w_bytes_for(d) + o * d * ex.w_bytes_for(o)
                + (ff - down) * ex.w_bytes_for(d) + down * ex.w_bytes_for(width)
                + m.norm_params_per_layer * ex.act_bytes)

    kinds = [(m.n_dense_layers, (1, m.d_ff, 0)),
             (m.n_moe_layers, (m.n_experts + m.n_shared_experts, m.expert_d_ff, m.router_params))]
    parts = [n * layer(*k) for n, k in kinds if np.any(n)]     # (n: an array for stacked models)
    layers = parts[0] if len(parts) == 1 else parts[0] + parts[1]
    head = 0.0 if m.tied_embeddings else m.lm_head_params * ex.lm_head_w_bytes
    return layers + m.embedding_params * ex.embedding_w_bytes + head + d * ex.act_bytes


def routed_expert_bytes(ex: Exec) -> float:
    """Weights of every routed expert of every MoE layer: n_moe_layers · n_experts · one expert, its
    matrices in the stored format (the down projection at d_in = moe_d_ff), as in
    :func:`weights_total_bytes`."""
    m = ex.model
    if not m.n_moe_layers:
        return 0.0
    if ex.dtype_members:
        return ex.per_weight_dtype(routed_expert_bytes)
    d, w = m.d_model, m.expert_d_ff
    down = d * w
    return float(m.n_moe_layers * m.n_experts * ((m.expert_params - down) * ex.w_bytes_for(d)
                                                  + down * ex.w_bytes_for(w)))


def weights_device_bytes(ex: Exec) -> float:
    """Weights resident on one device: (all parameters + replicated projections) / (tp·pp).

    When kv_heads < tp each device keeps ceil(kv/tp) KV heads, so the group holds
    (ceil(kv/tp)·tp − kv)·head_dim·d_model·2·layers extra K/V-projection parameters (0 otherwise);
    MLA keeps its down-projections d×(q_lora + kv_lora + rope) on every rank: (tp − 1)·that·layers.
    Bytes per tensor as in :func:`weights_total_bytes`.
    """
    m = ex.model
    if m.mla is not None:
        a = m.mla
        extra = (ex.tp - 1) * m.d_model * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim) * m.n_layers
    else:
        extra = (ex.kv_heads_per_device * ex.tp - m.n_kv_heads) * m.head_dim * m.d_model * 2 * m.n_layers
    if ex.ep > 1:       # routed experts split over the stage's ep devices, the rest over its tp
        routed = routed_expert_bytes(ex)
        return (weights_total_bytes(ex) - routed + extra * ex.w_bytes) / (ex.tp * ex.pp) + routed / (ex.ep * ex.pp)
    return (weights_total_bytes(ex) + extra * ex.w_bytes) / (ex.tp * ex.pp)


def active_weights_bytes_device(ex: Exec) -> float:
    """Weights one token multiplies through, per tensor-parallel rank over all pipeline stages (the
    least a decoding step must read): ((active parameters − LM head) · w_bytes + LM head ·
    lm_head_w_bytes) / tp — MoE: the token's k experts and the router; no embedding (a gather)."""
    m = ex.model
    n_act = m.active_params_per_token
    n_act = np.asarray(n_act, dtype=float) if np.ndim(n_act) else float(n_act)     # (stacked models: arrays)
    return ((n_act - m.lm_head_params) * ex.w_bytes + m.lm_head_params * ex.lm_head_w_bytes) / ex.tp


def mtp_weights_device_bytes(mtp_ex: Exec) -> float:
    """The MTP module's own weights on one device: its one-layer model's weights
    (:func:`weights_device_bytes` of ``mtp_ex``, whose model is ``Model.mtp_module()``) less the
    embedding, LM head and final norm it shares with the target, plus the 2d×d projection and its
    two norms (2d·d·w_bytes + 2·d·act_bytes) split over tp."""
    m = mtp_ex.model
    shared = (m.embedding_params * mtp_ex.embedding_w_bytes + m.d_model * mtp_ex.act_bytes
              + (0.0 if m.tied_embeddings else m.lm_head_params * mtp_ex.lm_head_w_bytes))
    own = 2.0 * m.d_model * m.d_model * mtp_ex.w_bytes_for(2 * m.d_model) + 2.0 * m.d_model * mtp_ex.act_bytes
    return weights_device_bytes(mtp_ex) - shared / mtp_ex.tp + own / mtp_ex.tp


# --------------------------------------------------------------------------- KV cache
def kv_bytes_per_token_device(ex: Exec) -> float:
    """K and V of one token on one device: the layers of its pipeline stage (layers/pp), its KV heads
    (``Exec.kv_bytes_per_token_layer`` = 2·ceil(kv_heads/tp)·head_dim·kv_bytes per layer)."""
    return ex.kv_bytes_per_token_layer * ex.model.n_layers / ex.pp


def kv_bytes(ex: Exec, tokens, seqs=None) -> np.ndarray:
    """KV cache of ``tokens`` stored tokens (summed over the batch) on one device. Windowed layers
    (sliding or chunked) of a model with ``attention_window`` W hold at most seqs·W of them:
    per-layer bytes · (global layers · N + windowed layers · min(N, seqs·W)) / pp (``seqs``: the
    sequences holding them; None prices every layer at N)."""
    m = ex.model
    n = np.asarray(tokens, dtype=float)
    if ex.dp > 1:      # attention data parallel: this device's group keeps its 1/dp of the sequences
        n = n / ex.dp
        seqs = None if seqs is None else np.asarray(seqs, dtype=float) / ex.dp
    if m.attention_window is None or seqs is None or m.n_window_layers == 0:
        return n * kv_bytes_per_token_device(ex)
    capped = np.minimum(n, np.asarray(seqs, dtype=float) * m.attention_window)
    return ex.kv_bytes_per_token_layer * (m.n_global_layers * n + m.n_window_layers * capped) / ex.pp


def tree_scratch_bytes(ex: Exec, B, q) -> np.ndarray:
    """KV slots of a tree step's q verified tokens (nodes + root) for each of B sequences: B·q tokens."""
    return kv_bytes(ex, np.asarray(B, dtype=float) * q)


# --------------------------------------------------------------------------- transient buffers
def activation_bytes(ex: Exec, tokens, lm_tokens) -> np.ndarray:
    """Transient activations of a pass of ``tokens`` tokens, ``lm_tokens`` of them needing logits:
    T·(2·d + (q + 2·kv)/tp + q/tp + 3·k·d_ff/tp)·act_bytes + lm_tokens·vocab/tp·4 (fp32 logits), k the
    experts each token runs (MoE: each holds its own gate/up/activation; 1 for a dense FFN)."""
    m, tp = ex.model, ex.tp
    t = np.asarray(tokens, dtype=float)
    if ex.dp > 1:      # attention data parallel: the device runs its group's 1/dp of the pass
        t, lm_tokens = t / ex.dp, np.asarray(lm_tokens, dtype=float) / ex.dp
    # MoE: each token runs its experts_per_token experts, each holding its own gate/up/activation
    # (stacked models are dense: d_ff, an array)
    ffn_width = m.d_ff if np.ndim(m.d_ff) else \
        max(m.d_ff if m.n_dense_layers else 0,
            (m.experts_per_token + m.n_shared_experts) * m.expert_d_ff if m.n_moe_layers else 0)
    per_token = (2 * m.d_model + (m.q_dim + 2 * m.kv_dim) / tp + m.q_dim / tp + 3 * ffn_width / tp)
    return t * (per_token * ex.act_bytes) + np.asarray(lm_tokens, dtype=float) * (m.vocab_size / tp * 4.0)


def score_bytes(ex: Exec, pairs) -> np.ndarray:
    """One layer's materialised fp32 attention scores, 4·heads/tp·pairs (0 with a fused kernel)."""
    if ex.rt.fused_attention:
        return np.float64(0.0)
    return 4.0 * ex.heads_per_device * np.asarray(pairs, dtype=float)


def prefill_footprint(ex: Exec, B, P) -> tuple:
    """(tokens, lm_tokens, score pairs) of the largest prefill pass for :func:`target_breakdown`: the
    B·P tokens of the batch in one pass, logits for the B last tokens and B·P² score pairs per layer
    (the full block an unfused kernel stores; none with a fused kernel); with a runtime that prefills
    each prompt on its own (``Runtime.prefill_per_sequence``) one sequence's: P tokens, one logit row,
    P² pairs. A runtime that also chunks caps the pass further (:func:`target_breakdown`)."""
    B = np.asarray(B, dtype=float)
    P = np.maximum(P, 1.0)
    if ex.rt.prefill_per_sequence:
        B = np.ones_like(B)
    return B * P, B, (0.0 if ex.rt.fused_attention else B * (P * P))


def _largest(values) -> np.ndarray:
    """Elementwise maximum of arrays that broadcast together (each kept in its own shape)."""
    out = np.asarray(values[0], dtype=float)
    for v in values[1:]:
        out = np.maximum(out, np.asarray(v, dtype=float))
    return out


# --------------------------------------------------------------------------- breakdowns
def target_breakdown(ex: Exec, kv_tokens, passes: list, seqs=None) -> dict:
    """The target device's parts: ``target_weights``, ``target_kv`` (``kv_tokens`` stored),
    ``activations`` and ``attention_scores`` of the largest of ``passes`` ((tokens, lm_tokens, score
    pairs) of each pass the strategy runs), ``runtime_overhead``. With chunked prefill a pass holds
    at most C = ``prefill_chunk_tokens`` tokens (score pairs scaled by C/tokens)."""
    chunk = ex.rt.prefill_chunk_tokens
    if chunk is not None:      # the scheduler never runs more than `chunk` tokens in one pass
        passes = [(np.minimum(t, chunk), np.minimum(lm, chunk), pr * np.minimum(1.0, chunk / np.maximum(t, 1.0)))
                  for t, lm, pr in passes]
    acts = [activation_bytes(ex, t, lm) for t, lm, _ in passes]
    scores = [score_bytes(ex, pr) for _, _, pr in passes]
    return {
        "target_weights": np.asarray(weights_device_bytes(ex)),
        "target_kv": kv_bytes(ex, kv_tokens, seqs),
        "activations": _largest(acts),
        "attention_scores": _largest(scores),
        "runtime_overhead": np.asarray(ex.rt.memory_overhead_bytes),
    }


@dataclass
class DraftParts:
    """A draft's memory: ``device`` = its parts on one device that holds it (``draft_weights``,
    ``draft_kv``), and its totals over every device that holds a share of it."""

    device: dict
    weights_total_bytes: object
    kv_total_bytes: object


def draft_breakdown(weights_bytes=0.0, kv_ex: Exec | None = None, kv_tokens=0.0, seqs=None, *,
                    weights_total=None) -> DraftParts:
    """The draft's parts per device: ``draft_weights`` = ``weights_bytes`` (a draft model's
    :func:`weights_device_bytes`, a head's parameters · bytes / tp, 0 for ``self`` and ``none``) and
    ``draft_kv`` = ``kv_tokens`` · :func:`kv_bytes_per_token_device` of ``kv_ex`` (the Exec whose KV
    the draft keeps; None: no KV). Totals over the devices: weights = ``weights_total`` (default: the
    per-device figure, a draft on one device); KV = per-device KV · kv_ex.tp · kv_ex.pp (each device of
    the draft's group keeps its share, as the target's KV total counts)."""
    kv = np.asarray(0.0) if kv_ex is None else kv_bytes(kv_ex, kv_tokens, seqs)
    kv_devices = 1 if kv_ex is None else kv_ex.tp * kv_ex.pp
    return DraftParts({"draft_weights": np.asarray(weights_bytes), "draft_kv": kv},
                      np.asarray(weights_bytes if weights_total is None else weights_total), kv * kv_devices)


@dataclass
class Footprint:
    """Memory of one strategy: the target device's parts, a separate draft device's parts (or None),
    and the totals over all devices."""

    device: dict                   # part -> bytes on the target's most loaded device
    other_device: dict | None      # part -> bytes on a separate draft device
    kv_total_bytes: object         # KV over all devices (target + tree scratch + draft)
    weights_total_bytes: object    # weights over all devices (target + draft)


def footprint(ex: Exec, target: dict, draft: DraftParts | None = None, *, separate: bool = False,
              draft_activations=None) -> Footprint:
    """Place the parts: the draft's on the target device, or (``separate``) on a device of its own that
    also holds ``draft_activations`` (when given) and the runtime overhead. Totals (every figure a
    total over the devices that hold it): KV = (target KV + tree scratch) · tp·pp + the draft's KV
    total; weights = :func:`weights_total_bytes` + the draft's weights total."""
    device, other = dict(target), None
    if draft is not None:
        if separate:
            other = dict(draft.device)
            if draft_activations is not None:
                other["activations"] = draft_activations
            other["runtime_overhead"] = np.asarray(ex.rt.memory_overhead_bytes)
        else:
            device.update(draft.device)
    kv = device["target_kv"] if "tree_scratch" not in device else device["target_kv"] + device["tree_scratch"]
    kv_total = kv * ex.stage_devices * ex.pp
    w_total = weights_total_bytes(ex)
    if draft is not None:
        kv_total = kv_total + draft.kv_total_bytes
        w_total = w_total + draft.weights_total_bytes
    return Footprint(device, other, kv_total, w_total)


def peak_device_bytes(device: dict, other: dict | None = None):
    """The most loaded device: Σ of the target device's parts (each addition through
    :func:`costmodel.fast.arrays.add_all`, in the parts' order), or the separate draft device's Σ when
    larger. The parts must already share one shape."""
    peak = add_all(np.asarray(0.0), device.values())    # 0 + x == 0.0 + x: numpy takes the int 0 as 0.0
    if other:
        peak = np.maximum(peak, sum(other.values()))
    return peak
