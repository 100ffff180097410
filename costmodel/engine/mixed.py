"""Mixed batches: one forward pass holding prefill chunks and decoding (or verifying) sequences.

A serving engine (vLLM, SGLang, TensorRT-LLM in-flight batching) runs, in one pass, some sequences
that are still processing their prompt in chunks and others that decode, each with its own
context. The pass is the engine's ordinary :class:`~costmodel.engine.ops.PassShape` with the
batch's sums (the GEMMs see every token; one batched attention kernel sees every query's pairs and
every sequence's context):

    tokens   = Σ_decode q_tok + Σ_chunks c
    lm       = Σ_decode q_lm  + (chunks that finish their prompt)
    pairs    = Σ_decode (p0 + p1·L_i) + Σ_chunks (c·L0 + c(c+1)/2)
    kv_read  = Σ_decode (k0 + k1·L_i) + Σ_chunks (L0 + c)

with, per decoding sequence, the coefficients of the strategy's own verification shape
(:func:`decode_coefficients`: q = 1 for plain decoding, γ+1 for a chain, T+1 for a tree), and for a
prefill chunk of c tokens after L0 tokens already in the cache the prefill shape's terms
(:func:`costmodel.engine.strategies.common.prefill_shape` is the chunk with L0 = 0).

:func:`mixed_pass_cost` prices such a pass with :func:`costmodel.engine.pass_cost.pass_cost`.
:class:`PassTable` is the same pass for an event loop that prices hundreds of thousands of steps:
the pass time is a sum over operators, and every operator but attention and the LM head depends
on ``tokens`` alone, the LM head on ``lm`` alone, and attention's FLOPs and bytes are affine in
(pairs, kv_read, tokens). So

    time = F(tokens) + H(lm) + layers · max(roofline terms of attention) + kernels · gap,
           plus the host's wait max(kernels · host_per_kernel − that, 0)   (as in pass_cost)

with F and H tabulated once from pass_cost's per-operator rows on every integer token count, and
attention's coefficients read from :func:`costmodel.engine.ops.layer_ops`; the terms are
:func:`costmodel.engine.roofline.roofline_terms`. Equal to pass_cost up to rounding (tested).
"""

from __future__ import annotations

import numpy as np

from costmodel.engine.execution import Exec
from costmodel.engine.ops import PassShape, kernel_count, layer_ops
from costmodel.engine.pass_cost import pass_cost
from costmodel.engine.roofline import Cost, operator_rows, roofline_terms


def mixed_shape(tokens, lm_tokens, pairs, kv_read_tokens) -> PassShape:
    """The pass of a mixed batch from its sums (module docstring); KV writes = tokens."""
    return PassShape(tokens=tokens, pairs=pairs, kv_hbm_tokens=kv_read_tokens, lm_tokens=lm_tokens)


def mixed_pass_cost(ex: Exec, tokens, lm_tokens, pairs, kv_read_tokens) -> Cost:
    """pass_cost of :func:`mixed_shape` (arrays broadcast)."""
    return pass_cost(mixed_shape(*(np.asarray(x, dtype=float) for x in (tokens, lm_tokens, pairs, kv_read_tokens))),
                     ex)


def chunk_terms(chunk, context_before):
    """(tokens, pairs, kv_read) of a prefill chunk of c tokens after L0 cached ones: c,
    c·L0 + c(c+1)/2 causal pairs, and L0 + c KV tokens read (the prefill shape when L0 = 0)."""
    c, l0 = chunk, context_before
    return c, c * l0 + c * (c + 1) / 2.0, l0 + c


def shape_coefficients(shape_at) -> tuple:
    """(q_tok, q_lm, p0, p1, k0, k1) of one sequence's decoding shape, affine in its context L:
    ``shape_at(L)`` is the strategy's PassShape for one sequence (B = 1) at context L."""
    s0, s1 = shape_at(0.0), shape_at(1.0)

    def f(x):
        return float(np.ravel(np.asarray(x, dtype=float))[0])
    lm0 = s0.tokens if s0.lm_tokens is None else s0.lm_tokens
    return (f(s0.tokens), f(lm0), f(s0.pairs), f(s1.pairs) - f(s0.pairs),
            f(s0.kv_hbm_tokens), f(s1.kv_hbm_tokens) - f(s0.kv_hbm_tokens))


class PassTable:
    """Pass time of an Exec as a function of a mixed batch's sums (module docstring), for scalars
    (:meth:`time`) and arrays (:meth:`times`). ``max_tokens``: the largest token count tabulated
    (the table grows when a larger one is asked for)."""

    def __init__(self, ex: Exec, max_tokens: int):
        self.ex = ex
        m = ex.model
        # attention's FLOPs and bytes per unit of pairs, kv_read and tokens (writes = tokens)
        base = self._attn(PassShape(tokens=0.0, pairs=0.0, kv_hbm_tokens=0.0))
        self.a_f0, self.a_h0 = base
        fp, hp = self._attn(PassShape(tokens=0.0, pairs=1.0, kv_hbm_tokens=0.0))
        fk, hk = self._attn(PassShape(tokens=0.0, pairs=0.0, kv_hbm_tokens=1.0))
        ft, ht = self._attn(PassShape(tokens=1.0, pairs=0.0, kv_hbm_tokens=0.0))
        self.f_pairs, self.f_kv, self.f_tok = fp - base[0], fk - base[0], ft - base[0]
        self.h_pairs, self.h_kv, self.h_tok = hp - base[1], hk - base[1], ht - base[1]
        self.layers = float(m.n_layers)
        self.rates = (float(np.ravel(ex.matrix_flops_per_s)[0]), float(np.ravel(ex.vector_flops_per_s)[0]),
                      float(np.ravel(ex.hbm_bytes_per_s)[0]), float(ex.hw.l2_bandwidth_bytes_per_s))
        kernels = float(kernel_count(PassShape(tokens=1.0, pairs=0.0, kv_hbm_tokens=0.0), ex))
        gap = ex.hw.graph_kernel_launch_s if ex.rt.uses_cuda_graphs else ex.hw.kernel_launch_s
        self.launch_s = kernels * gap
        self.host_s = kernels * ex.rt.host_per_kernel_s
        self._build(max(int(max_tokens), 16))

    def _attn(self, shape):
        op = next(o for o in layer_ops(shape, self.ex) if o.name == "attention")
        return float(np.ravel(op.flops)[0]), float(np.ravel(op.hbm_bytes)[0])

    def _build(self, n: int):
        t = np.arange(n + 1, dtype=float)
        with operator_rows(True):
            cost = pass_cost(mixed_shape(t, t, np.zeros_like(t), np.zeros_like(t)), self.ex)
        F = np.zeros_like(t)
        H = np.zeros_like(t)
        for name, _f, _h, secs, _b in cost.ops:
            s = np.broadcast_to(np.asarray(secs, dtype=float), t.shape)
            if name == "lm_head":
                H = H + s
            elif name != "attention":
                F = F + s
        self.F, self.H = F, H
        self.F_list, self.H_list = F.tolist(), H.tolist()
        self.n = n

    def _ensure(self, n):
        if n > self.n:
            self._build(int(max(n, 2 * self.n)))

    def attention_s(self, tokens, pairs, kv):
        """layers · the attention operator's time: max of its roofline terms (arrays or floats)."""
        peak_m, peak_v, bw, l2bw = self.rates
        f = self.a_f0 + self.f_pairs * pairs + self.f_kv * kv + self.f_tok * tokens
        h = self.a_h0 + self.h_pairs * pairs + self.h_kv * kv + self.h_tok * tokens
        c, mem, l2, _ = roofline_terms("attention", f, h, 0.0, 0.0, 0.0, peak_m, peak_v, bw, l2bw)
        if isinstance(c, np.ndarray) or isinstance(h, np.ndarray):
            return self.layers * np.maximum(np.maximum(c, mem), l2)
        return self.layers * max(c, mem, l2)

    def time(self, tokens: int, lm: int, pairs: float, kv: float) -> float:
        """Seconds of one pass (Python floats; ``tokens`` and ``lm`` integers)."""
        if tokens > self.n or lm > self.n:
            self._ensure(max(tokens, lm))
        dev = self.F_list[tokens] + self.H_list[lm] + self.attention_s(tokens, pairs, kv) + self.launch_s
        wait = self.host_s - dev
        return dev + wait if wait > 0.0 else dev

    def times(self, tokens, lm, pairs, kv):
        """:meth:`time` on arrays (``tokens``, ``lm`` integer arrays or ints)."""
        ti, li = np.asarray(tokens, dtype=np.int64), np.asarray(lm, dtype=np.int64)
        self._ensure(int(max(np.max(ti), np.max(li))))
        dev = self.F[ti] + self.H[li] + self.attention_s(ti.astype(float), np.asarray(pairs, dtype=float),
                                                         np.asarray(kv, dtype=float)) + self.launch_s
        return dev + np.maximum(self.host_s - dev, 0.0)
