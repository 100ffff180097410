"""Per-operator FLOPs and bytes of one forward pass, on numpy arrays.

A pass runs ``tokens`` query tokens (B sequences × q new tokens, summed) through every layer on
one device of a tensor-parallel group of ``tp``. Quantities are **per device**; multiply by ``tp``
for the group. Formulas (per layer unless stated):

* GEMM:       FLOPs = 2 · params · tokens;  HBM bytes = params · w_bytes + tokens·(d_in + d_out)·act_bytes,
              w_bytes the runtime's stored format (element + scale bytes per group; the LM head and
              embedding in their own formats: Exec.w_bytes_for, lm_head_w_bytes, embedding_w_bytes);
              weight-only int8/int4 (and fp8 on GPUs without fp8 units): + params · dequant_flops_per_weight vector FLOPs (unpack, convert, scale;
              once per weight read, independent of tokens), which add to the operator's compute term
* MoE FFN:    FLOPs use the k active experts; bytes use E·(1 − (1 − k/E)^tokens) distinct experts; its
              SiLU(gate)·up is (k + shared)·expert_d_ff wide per token (split over tp, or over ep); a
              runtime without fp8 MoE GEMMs (Runtime.fp8_moe_experts) runs an fp8 engine's experts
              weight-only: 1-byte weights dequantised to fp16, FLOPs at the fp16 rate (Exec.experts_weight_only)
* attention:  FLOPs = 4 · heads · head_dim · pairs (pairs = Σ over queries of context positions computed);
              HBM bytes = KV tokens read from HBM · 2·kv_heads·head_dim·kv_bytes + KV writes + q/o traffic;
              L2 bytes = KV tokens re-read from L2; at the fp16 rate in an fp8 engine whose runtime has no fp8
              attention kernels (Runtime.fp8_context_fmha); a runtime whose kernels do not share a GQA KV head
              among its query heads (Runtime.gqa_attention) reads or copies it once per query head
              (kv_reads.gqa_extra_bytes; L2 absorbs the re-reads it holds)
* all-reduce: two per layer of tokens·d_model·act_bytes (parallel.allreduce_time_s; ring, tree or the
              faster per message (auto, the default), over
              parallel.tp_link: the network when the TP group spans nodes)
* PP hand-off: per pass, pp − 1 activation hand-offs of tokens·d_model·act_bytes plus the sampled ids back
              to the first stage (parallel.pipeline_handoff_s); the pass itself is all layers in sequence,
              i.e. one micro-batch through every stage
* LM head:    2 · vocab·d_model/tp · lm_tokens FLOPs; its weights once, plus fp32 logits written
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from costmodel.engine.execution import Exec
from costmodel.engine.kv_reads import gqa_extra_bytes
from costmodel.fast.arrays import broadcast_shape


@dataclass
class Op:
    """One operator, repeated ``count`` times per pass (e.g. once per layer). Arrays broadcast."""

    name: str
    kind: str                 # 'matrix', 'vector', 'attention' (matrix units), 'comm'
    count: float
    flops: object = 0.0
    hbm_bytes: object = 0.0
    l2_bytes: object = 0.0
    comm_s: object = 0.0
    group: str = "layer"      # 'layer', 'pass', 'draft', 'heads'
    #: vector-unit (CUDA-core) FLOPs spent inside this matrix operator besides its matrix FLOPs:
    #: unpacking and scaling weight-only quantised weights (``Exec.dequant_flops_per_weight``)
    dequant_flops: object = 0.0
    #: the matrix rate this operator runs at when not the pass's (``Exec.expert_matrix_flops_per_s``:
    #: MoE experts kept in fp16 in an fp8 engine); None = ``Exec.matrix_flops_per_s``
    unit_flops_per_s: object = None
    #: an upper bound (a float) on flops / hbm_bytes in every element, when the pass's shape gives
    #: one (attention: :attr:`PassShape.max_pairs_per_kv_token`); None = not known
    max_flops_per_byte: object = None


_LAZY = object()


class AffineOp(Op):
    """An operator whose work is affine in one array ``x`` of the pass (its tokens):
    FLOPs = f1·x, HBM bytes = h0 + h1·x. The arrays are built on first read (a prefill's work
    totals are never read, and a compute-bound GEMM's time needs only its FLOPs), and the
    roofline can settle the binding term from the two ends of x's range
    (``costmodel.engine.pass_cost._dominant_term``). Assigning ``flops`` or ``hbm_bytes`` stores that value."""

    def __init__(self, name, kind, count, x, f1, h0, h1, dequant_flops=0.0, group="layer"):
        # Op's fields set directly (l2_bytes and comm_s keep Op's class defaults, 0.0): this runs
        # dozens of times per evaluate()
        self.name, self.kind, self.count, self.group, self.dequant_flops = name, kind, count, group, dequant_flops
        self.x, self.f1, self.h0, self.h1 = x, f1, h0, h1
        self._flops = self._hbm = _LAZY

    def _new_flops(self):
        return self.f1 * self.x

    def _new_hbm_bytes(self):
        t = self.h1 * self.x
        if type(t) is np.ndarray and t.ndim and broadcast_shape(np.shape(self.h0), t.shape) == t.shape:
            return np.add(self.h0, t, out=t)          # h0 + h1·x, the product's array reused
        return self.h0 + t

    def work_array(self, name: str):
        """(the operator's ``flops`` or ``hbm_bytes``, whether that is a new array of the caller's
        own): the value kept once the property was read, else computed afresh and not kept (a
        caller that turns it into a time in place saves an array; a later read computes it again,
        the same operations)."""
        kept = self._flops if name == "flops" else self._hbm
        if kept is not _LAZY:
            return kept, False
        v = self._new_flops() if name == "flops" else self._new_hbm_bytes()
        return v, type(v) is np.ndarray and v.ndim > 0

    @property
    def flops(self):
        v = self._flops
        if v is _LAZY:
            v = self._flops = self._new_flops()
        return v

    @flops.setter
    def flops(self, v):
        self._flops = v

    @property
    def hbm_bytes(self):
        v = self._hbm
        if v is _LAZY:
            v = self._hbm = self._new_hbm_bytes()
        return v

    @hbm_bytes.setter
    def hbm_bytes(self, v):
        self._hbm = v


@dataclass
class PassShape:
    """What one pass computes, per device and summed over the batch (arrays)."""

    tokens: object                    # query tokens through the GEMMs
    pairs: object                     # Σ over queries of attended positions (attention FLOPs)
    kv_hbm_tokens: object             # KV tokens read from HBM per layer
    kv_l2_tokens: object = 0.0        # KV tokens re-read from L2 per layer
    lm_tokens: object = None          # tokens that need logits (defaults to tokens)
    attn_kernels: object = 1.0        # attention launches per layer (per_branch: one per branch)
    kv_write_tokens: object = None    # new KV entries written (defaults to tokens)
    seqs: object = None               # sequences whose KV is read (windowed layers read ≤ seqs·window)
    extra_ops: list = field(default_factory=list)
    #: an upper bound (a float) on pairs / kv_hbm_tokens in every element, kv_hbm_tokens >= 1
    #: everywhere, when the strategy knows one (:func:`pairs_per_kv_token_bound`); it bounds the
    #: attention's FLOPs per byte (:func:`_attention_ops`). None = not known
    max_pairs_per_kv_token: object = None


def pairs_per_kv_token_bound(B, L, lead, tail):
    """A bound for :attr:`PassShape.max_pairs_per_kv_token` of a pass whose B sequences each read
    their L cached tokens once and compute lead·L + tail attention pairs: pairs / KV tokens read =
    lead + tail/L <= max lead + max tail / min L (max tail >= 0). None for one configuration (its
    scalar pass compares the terms itself), or unless B >= 1 and L >= 1 everywhere (NaN fails)."""
    if not (np.ndim(B) or np.ndim(L)):
        return None
    b_min, l_min, tail_max = float(np.min(B)), float(np.min(L)), float(np.max(tail))
    if not (b_min >= 1.0 and l_min >= 1.0 and tail_max >= 0.0):
        return None
    rho = float(np.max(lead)) + tail_max / l_min
    return rho if 0.0 <= rho < np.inf else None


def gemm(name, params, tokens, d_in, d_out, ex: Exec, count=None, expert=False) -> Op:
    """2·params·tokens FLOPs; weights once (in the runtime's stored format, scales included: the
    ``lm_head`` in ``Exec.lm_head_w_bytes``, the others in ``Exec.w_bytes_for(d_in)``) plus activations
    in and out; weight-only quantised weights are dequantised once per pass on the vector units
    (params · dequant_flops_per_weight; none for an LM head the runtime keeps unquantised). MoE
    experts (``expert``) of an fp8 engine without fp8 MoE GEMMs run weight-only: fp16 rate
    (``Exec.expert_matrix_flops_per_s``) and ``Exec.expert_dequant_flops_per_weight``."""
    t = np.asarray(tokens, dtype=float)
    head = name == "lm_head"
    w = ex.lm_head_w_bytes if head else ex.w_bytes_for(d_in)
    dq = 0.0 if head and not ex.rt.quantize_lm_head else ex.expert_dequant_flops_per_weight if expert \
        else ex.dequant_flops_per_weight
    op = AffineOp(name, "matrix", ex.model.n_layers if count is None else count, t, f1=2.0 * params,
                  h0=params * w, h1=(d_in + d_out) * ex.act_bytes,
                  dequant_flops=params * dq if np.ndim(dq) or dq else 0.0)
    op.unit_flops_per_s = ex.expert_matrix_flops_per_s if expert else None
    return op


def _attention_ops(shape: PassShape, ex: Exec, t) -> list[Op]:
    """The attention operator(s): global layers over the whole context; windowed layers (sliding or
    chunked) over at most W positions per query and seqs·W KV tokens per layer (``PassShape.seqs``;
    a shape without it is priced unwindowed). MLA: the shared latent is the KV, and each pair costs
    min(absorbed, up-projected) FLOPs (module docstring)."""
    m, tp, act = ex.model, ex.tp, ex.act_bytes
    q_dim = m.q_dim / tp
    kv_tok = ex.kv_bytes_per_token_layer
    writes = t if shape.kv_write_tokens is None else np.asarray(shape.kv_write_tokens, dtype=float)
    kv_read = np.asarray(shape.kv_hbm_tokens, dtype=float)
    pairs = np.asarray(shape.pairs, dtype=float)
    l2 = np.asarray(shape.kv_l2_tokens, dtype=float)
    kinds = [("attention", m.n_global_layers, kv_read, pairs, l2)]
    if m.n_window_layers:
        w = float(m.attention_window)
        if shape.seqs is None:
            wr, wp, wl = kv_read, pairs, l2
        else:
            cap = np.asarray(shape.seqs, dtype=float) * w
            wr, wp, wl = np.minimum(kv_read, cap), np.minimum(pairs, t * w), np.minimum(l2, cap)
        kinds.append(("attention_window", m.n_window_layers, wr, wp, wl))
    ops = []
    for name, count, read, pr, l2_tokens in kinds:
        if not np.any(count):            # (an array for stacked models)
            continue
        # KV read + (KV written + q and o traffic): the bracket is per batch, the read spans the context
        hbm = read * kv_tok + (writes * kv_tok + t * (2.0 * q_dim * act))
        if m.mla is None:
            flops = 4.0 * ex.heads_per_device * m.head_dim * pr
        else:
            a, h = m.mla, ex.heads_per_device
            absorbed = 2.0 * h * (2.0 * a.kv_lora_rank + a.qk_rope_head_dim) * pr
            up = (2.0 * h * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim) * pr
                  + 2.0 * m.mla_kv_up_params / tp * np.maximum(read - t, 0.0))
            flops = np.minimum(absorbed, up)
        gqa_hbm, gqa_l2 = gqa_extra_bytes(ex, read)
        if gqa_hbm is not None:
            hbm, l2_tokens = hbm + gqa_hbm, l2_tokens * kv_tok + gqa_l2
        else:
            l2_tokens = l2_tokens * kv_tok
        if not ex.rt.fused_attention:   # scores materialised in fp32: written once, read once
            hbm = hbm + 2.0 * 4.0 * ex.heads_per_device * pr
        ops.append(Op(name, "attention", count, flops=flops, hbm_bytes=hbm, l2_bytes=l2_tokens,
                      unit_flops_per_s=ex.attention_matrix_flops_per_s,
                      max_flops_per_byte=_attention_flops_per_byte(shape, ex) if name == "attention" else None))
    return ops


def _attention_flops_per_byte(shape: PassShape, ex: Exec):
    """An upper bound on the global attention's FLOPs per HBM byte from the shape's bound ρ on pairs
    per KV token read (:attr:`PassShape.max_pairs_per_kv_token`): FLOPs 4·heads·head_dim·pairs <=
    4·heads·head_dim·ρ·read, bytes >= read·(KV bytes per token) (the writes, q/o traffic, GQA
    re-reads and unfused scores only add), so FLOPs/byte <= 4·heads·head_dim·ρ / KV bytes per
    token. None without ρ, for MLA (its FLOPs are not per pair alone) and for per-element
    (stacked) head counts."""
    rho = shape.max_pairs_per_kv_token
    m = ex.model
    if rho is None or m.mla is not None:
        return None
    h, kv_tok = ex.heads_per_device, ex.kv_bytes_per_token_layer
    if np.ndim(h) or np.ndim(kv_tok) or np.ndim(rho) or not float(kv_tok) > 0.0:
        return None
    return 4.0 * float(h) * m.head_dim * float(rho) / float(kv_tok)


def _routed_experts_op(ex: Exec, t_stage) -> Op:
    """The routed experts of the MoE layers on one device.

    Tensor parallel (ep = 1): every device holds 1/tp of each expert and sees all T tokens:
    FLOPs 2·(P_e/tp)·k·T, bytes distinct·P_e/tp·w_bytes + T·2d·act·k, distinct = E·(1 − (1 − k/E)^T).
    Expert parallel (ep > 1): a device holds E/ep whole experts and receives the k·T/ep token-expert
    pairs routed to them (routing uniform over experts) from the stage's T tokens:
    FLOPs 2·P_e·k·T/ep, bytes (E/ep)·(1 − (1 − k/E)^T)·P_e·w_bytes + (k·T/ep)·2d·act."""
    m, act = ex.model, ex.act_bytes
    d, L = m.d_model, m.n_moe_layers
    e, k = m.n_experts, m.experts_per_token
    t = t_stage
    w, dq = ex.w_bytes, ex.expert_dequant_flops_per_weight
    if ex.ep <= 1:
        distinct = e * (1.0 - (1.0 - k / e) ** t)
        per_expert = m.expert_params / ex.tp
        flops, acts = 2.0 * per_expert * k * t, t * (d + d) * act * k
    else:
        distinct = e / ex.ep * (1.0 - (1.0 - k / e) ** t)
        per_expert = float(m.expert_params)
        pairs = t * k / ex.ep
        flops, acts = 2.0 * per_expert * pairs, pairs * (d + d) * act
    return Op("moe_ffn", "matrix", L, flops=flops, hbm_bytes=distinct * per_expert * w + acts,
              dequant_flops=distinct * per_expert * dq if np.ndim(dq) or dq else 0.0,
              unit_flops_per_s=ex.expert_matrix_flops_per_s)


def _ffn_ops(ex: Exec, t, t_stage=None) -> list[Op]:
    """Dense FFN layers, MoE layers (routed experts, shared experts, router) and their activation.
    ``t`` = the device's tokens; ``t_stage`` = the stage's tokens that reach the routed experts
    (attention data parallel: dp·t; else t)."""
    m, tp, act = ex.model, ex.tp, ex.act_bytes
    d = m.d_model
    t_stage = t if t_stage is None else t_stage
    ops = []
    if np.any(m.n_dense_layers):
        ops.append(gemm("ffn", m.dense_ffn_params / tp, t, d, d, ex, count=m.n_dense_layers))
    if m.n_moe_layers:
        L = m.n_moe_layers
        e = m.n_experts
        per_expert = m.expert_params / tp
        ops.append(_routed_experts_op(ex, t_stage if ex.ep > 1 else t))
        if m.n_shared_experts:
            ops.append(gemm("shared_experts", m.n_shared_experts * per_expert, t, d, d, ex, count=L, expert=True))
        ops.append(gemm("router", d * e, t, d, e, ex, count=L))
    # SiLU(gate)·up: each token runs its k routed experts and the shared ones, each with its own
    # expert_d_ff-wide activation; split over tp (ep ≤ 1, the device's t tokens) or over ep (the stage's
    # t_stage tokens; shared experts on t = t_stage/dp tokens over tp give the same width as ep = dp·tp)
    moe_t, moe_split = (t, tp) if ex.ep <= 1 else (t_stage, ex.ep)
    moe_ff = (m.experts_per_token + m.n_shared_experts) * m.expert_d_ff / moe_split if m.n_moe_layers else 0.0
    if m.n_moe_layers and m.n_dense_layers:
        ops.append(AffineOp("ffn_activation", "vector", m.n_dense_layers, t, f1=4.0 * m.d_ff / tp, h0=0.0,
                            h1=3.0 * (m.d_ff / tp) * act))
        ops.append(AffineOp("moe_activation", "vector", m.n_moe_layers, moe_t, f1=4.0 * moe_ff,
                            h0=0.0, h1=3.0 * moe_ff * act))
    elif m.n_moe_layers:
        ops.append(AffineOp("ffn_activation", "vector", m.n_layers, moe_t, f1=4.0 * moe_ff, h0=0.0, h1=3.0 * moe_ff * act))
    else:
        ff = m.d_ff / tp
        ops.append(AffineOp("ffn_activation", "vector", m.n_layers, t, f1=4.0 * ff, h0=0.0, h1=3.0 * ff * act))
    return ops


def mtp_projection_op(ex: Exec, tokens) -> Op:
    """An MTP pass's projection of [normed embedding; normed hidden state] (2d → d) to the module's
    layer input: a GEMM of 2·d·d/tp parameters over the device's tokens (tokens/dp with attention
    data parallelism), once per pass."""
    d = ex.model.d_model
    op = gemm("mtp_projection", 2.0 * d * d / ex.tp, np.asarray(tokens, dtype=float) / ex.dp, 2 * d, d, ex, count=1)
    op.group = "pass"
    return op


def local_shape(shape: PassShape, dp: int) -> PassShape:
    """One attention data-parallel group's share of a pass: every batch quantity / dp (the batch's
    sequences spread evenly over the dp groups; a fraction of a sequence is a mean over groups)."""
    def part(v):
        return None if v is None else np.asarray(v, dtype=float) / dp
    return PassShape(tokens=part(shape.tokens), pairs=part(shape.pairs), kv_hbm_tokens=part(shape.kv_hbm_tokens),
                     kv_l2_tokens=part(shape.kv_l2_tokens), lm_tokens=part(shape.lm_tokens),
                     attn_kernels=shape.attn_kernels, kv_write_tokens=part(shape.kv_write_tokens),
                     seqs=part(shape.seqs), extra_ops=shape.extra_ops)


def moe_alltoall_ops(ex: Exec, t) -> list[Op]:
    """Expert parallel with attention data parallel (dp > 1): each MoE layer sends every token to the
    devices of its k experts (dispatch) and brings the k results back (combine), an all-to-all over
    the stage's ep devices each way (:func:`costmodel.engine.parallel.alltoall_time_s`). A device
    sends the t/tp tokens of its share: dispatch in fp8 with a 4-byte scale per 128 values when the
    matrix units run fp8/fp4 (DeepEP's FP8 dispatch), else in the activation dtype; combine in the
    activation dtype. None without dp > 1: with TP attention every device holds every token and the
    layer's all-reduce combines the experts' outputs."""
    m = ex.model
    if ex.dp <= 1 or not m.n_moe_layers:
        return []
    from costmodel.engine.parallel import alltoall_time_s, tp_link
    link = tp_link(ex.hw, ex.stage_devices, ex.pp)
    sent = np.asarray(t, dtype=float) / ex.tp
    k, d = m.experts_per_token, m.d_model
    disp = 1.0 + 4.0 / 128.0 if ex.compute_dtype in ("fp8", "fp4") else ex.act_bytes
    return [Op("moe_dispatch", "comm", m.n_moe_layers, hbm_bytes=0.0,
               comm_s=alltoall_time_s(sent, k, ex.ep, d, disp, link)),
            Op("moe_combine", "comm", m.n_moe_layers, hbm_bytes=0.0,
               comm_s=alltoall_time_s(sent, k, ex.ep, d, ex.act_bytes, link))]


def layer_ops(shape: PassShape, ex: Exec) -> list[Op]:
    """Operators of one pass on one device (decoder layers, embedding, LM head). With attention data
    parallelism (dp > 1) the device runs its group's share of the batch (:func:`local_shape`) except
    in the routed experts, which see the stage's tokens (:func:`_routed_experts_op`)."""
    m, tp, act = ex.model, ex.tp, ex.act_bytes
    t_stage = np.asarray(shape.tokens, dtype=float)
    if ex.dp > 1:
        shape = local_shape(shape, ex.dp)
    t = np.asarray(shape.tokens, dtype=float)
    L = m.n_layers
    d = m.d_model
    if m.mla is None:
        q_dim, kv_dim_dev = m.q_dim / tp, ex.kv_heads_per_device * m.head_dim
        qkv = gemm("qkv_proj", d * (q_dim + 2 * kv_dim_dev), t, d, q_dim + 2 * kv_dim_dev, ex)
    else:     # down-projections on every rank, up-projections split by heads
        a = m.mla
        latent = a.kv_lora_rank + a.qk_rope_head_dim
        q_in = d * a.q_lora_rank + a.q_lora_rank * m.q_dim / tp if a.q_lora_rank else d * m.q_dim / tp
        qkv = gemm("qkv_proj", q_in + d * latent + m.mla_kv_up_params / tp, t, d, m.q_dim / tp + latent, ex)
    ops = [AffineOp("norm_rope_residual", "vector", L, t, f1=12.0 * d, h0=0.0, h1=6.0 * d * act), qkv]
    ops.extend(_attention_ops(shape, ex, t))
    ops.append(gemm("o_proj", m.o_dim / tp * d, t, m.o_dim / tp, d, ex))
    ops.extend(_ffn_ops(ex, t, t_stage))
    if np.any(np.greater(tp, 1)):       # (an array of device counts: 0 s where a count is 1)
        from costmodel.engine.parallel import allreduce_time_s
        msg = t * d * act
        # with attention data parallelism the MoE layers combine by all-to-all, not by all-reduce
        n_ar = 2 * L if ex.dp <= 1 else L + m.n_dense_layers
        ops.append(Op("allreduce", "comm", n_ar, hbm_bytes=0.0,
                      comm_s=allreduce_time_s(msg, tp, ex.tp_allreduce_link, ex.allreduce_algorithm)))
    ops.extend(moe_alltoall_ops(ex, t))
    lm_t = t if shape.lm_tokens is None else np.asarray(shape.lm_tokens, dtype=float)
    if ex.pp > 1:
        from costmodel.engine.parallel import pipeline_handoff_s
        ops.append(Op("pp_handoff", "comm", 1, hbm_bytes=0.0, group="pass",
                      comm_s=pipeline_handoff_s(t, lm_t, d, act, ex.hw, tp, ex.pp)))
    vocab = m.vocab_size / tp
    ops.append(AffineOp("embedding", "vector", 1, t, f1=0.0, h0=0.0, h1=2.0 * d * act, group="pass"))
    head = gemm("lm_head", vocab * d, lm_t, d, 0, ex, count=1)
    head.h1 = head.h1 + vocab * 4.0           # fp32 logits written
    head.group = "pass"
    ops.append(head)
    ops.extend(shape.extra_ops)
    return ops


def kernel_count(shape: PassShape, ex: Exec) -> np.ndarray:
    """Kernel launches of a pass: layers·(kernels per layer − 1 + attention launches) + per-pass."""
    rt, m = ex.rt, ex.model
    attn = np.asarray(shape.attn_kernels, dtype=float)
    extra = sum(op.count for op in shape.extra_ops)
    return m.n_layers * (rt.kernels_per_layer - 1.0 + attn) + rt.kernels_per_pass + extra
