"""One forward pass on the unit device, worked out from the roofline's definition for the tests.

The unit device (tests/data/unit-hw.yaml) has round numbers: HBM 1e12 B/s, matrix units 1e14 FLOP/s
(fp16), vector units 1e13 FLOP/s, L2 of 1e7 B at 1e13 B/s, no launch cost, efficiencies 1; the unit
runtime (tests/data/unit-rt.yaml) has no kernels, host time or step overhead. So a pass is the sum
over its operators of

    elementwise:  max(FLOPs / 1e13, bytes / 1e12)          attention: max(FLOPs / 1e14, bytes / 1e12,
    GEMM:         √((FLOPs / 1e14)² + (bytes / 1e12)²)                    (bytes + L2 re-reads) / 1e13)

with each operator's FLOPs and bytes written out below from the model's dimensions (fp16 weights and
activations, a gated FFN, an untied LM head). Written independently of the engine's code: a test
that compares the two checks the engine's physics, not its arithmetic against itself.
"""

import math
from dataclasses import dataclass

HBM_B_PER_S, MATRIX_FLOP_PER_S, VECTOR_FLOP_PER_S, L2_B_PER_S, L2_BYTES = 1e12, 1e14, 1e13, 1e13, 1e7


@dataclass(frozen=True)
class Dims:
    layers: int
    d: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int


#: tests/data/unit-model.yaml and tests/data/unit-draft.yaml
UNIT = Dims(layers=2, d=64, heads=4, kv_heads=2, head_dim=16, d_ff=128, vocab=1000)
DRAFT = Dims(layers=1, d=32, heads=2, kv_heads=1, head_dim=16, d_ff=64, vocab=1000)


def gemm_s(flops, nbytes):
    return math.sqrt((flops / MATRIX_FLOP_PER_S) ** 2 + (nbytes / HBM_B_PER_S) ** 2)


def elementwise_s(flops, nbytes):
    return max(flops / VECTOR_FLOP_PER_S, nbytes / HBM_B_PER_S)


def kv_bytes_per_token_layer(m: Dims, kv_elem_bytes=2.0):
    """K and V of one token in one layer: 2 · kv_heads · head_dim · bytes."""
    return 2 * m.kv_heads * m.head_dim * kv_elem_bytes


def attention_bytes(m: Dims, tokens, kv_read, writes=None, kv_elem_bytes=2.0):
    """One layer's attention HBM bytes: context KV read + new KV written + q in and o out (fp16)."""
    writes = tokens if writes is None else writes
    kv = kv_bytes_per_token_layer(m, kv_elem_bytes)
    return kv_read * kv + writes * kv + tokens * 2 * (m.heads * m.head_dim) * 2


def pass_s(m: Dims, tokens, pairs, kv_read, lm=None, kv_l2=0.0, writes=None, kv_elem_bytes=2.0):
    """Seconds of one pass of ``tokens`` query tokens (``lm`` of them need logits) attending to
    ``pairs`` (query, key) positions, reading ``kv_read`` context tokens' KV per layer from HBM
    and ``kv_l2`` more from L2."""
    T = tokens
    lm = T if lm is None else lm
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    norm = elementwise_s(12 * m.d * T, 6 * m.d * 2 * T)        # two RMSNorms, RoPE, residual adds
    p_qkv = m.d * (q + 2 * kv)
    qkv = gemm_s(2 * p_qkv * T, p_qkv * 2 + T * (m.d + q + 2 * kv) * 2)
    hbm = attention_bytes(m, T, kv_read, writes, kv_elem_bytes)
    l2 = kv_l2 * kv_bytes_per_token_layer(m, kv_elem_bytes)
    attn = max(4 * m.heads * m.head_dim * pairs / MATRIX_FLOP_PER_S, hbm / HBM_B_PER_S, (hbm + l2) / L2_B_PER_S)
    o = gemm_s(2 * q * m.d * T, q * m.d * 2 + T * (q + m.d) * 2)
    p_ffn = 3 * m.d * m.d_ff
    ffn = gemm_s(2 * p_ffn * T, p_ffn * 2 + T * (m.d + m.d) * 2)
    act = elementwise_s(4 * m.d_ff * T, 3 * m.d_ff * 2 * T)   # SiLU(gate)·up: gate, up read, product written
    embed = 2 * m.d * 2 * T / HBM_B_PER_S                   # gather a row, write it
    head = gemm_s(2 * m.vocab * m.d * lm, m.vocab * m.d * 2 + lm * m.d * 2 + lm * m.vocab * 4)
    return m.layers * (norm + qkv + attn + o + ffn + act) + embed + head


def decode_s(m: Dims, B, q, L, **kw):
    """B sequences × q causal new tokens over L cached tokens: B·q tokens, B·(q·L + q(q+1)/2) pairs,
    B·L context tokens read."""
    return pass_s(m, B * q, B * (q * L + q * (q + 1) / 2), B * L, **kw)


def prefill_s(m: Dims, B, P):
    """B prompts of P tokens: B·P tokens, B·P(P+1)/2 causal pairs, B·P KV tokens read, B logits."""
    return pass_s(m, B * P, B * P * (P + 1) / 2, B * P, lm=B)


def launch_runtime(tmp_path) -> str:
    """tests/data/unit-rt.yaml with 1 ms of host work per kernel launch, 10 kernels per layer (attention
    one of them) and 5 per pass, written under ``tmp_path``: every pass on the unit device is host-bound
    (its device time is microseconds), so a step's time counts its launches."""
    import os
    rt = open(os.path.join(os.path.dirname(__file__), "data", "unit-rt.yaml")).read()
    rt = (rt.replace("kernels_per_layer: {value: 0", "kernels_per_layer: {value: 10")
            .replace("kernels_per_pass: {value: 0", "kernels_per_pass: {value: 5")
            .replace("host_per_kernel_s: {value: 0.0", "host_per_kernel_s: {value: 1.0e-03"))
    p = tmp_path / "launch.yaml"
    p.write_text(rt)
    return str(p)
