"""EAGLE-3 draft heads (Li et al. 2025, arXiv:2503.01840) as serving stacks run them.

The head (SafeAILab/EAGLE ``eagle/model/cnets.py``, the EAGLE-3 ``Model``):

* ``fc``: a 3·d × d matrix fusing the target's hidden states from three layers (low, middle, high).
  It runs on tokens that carry target features: the first draft pass of a step; later passes feed the
  head's own d-wide output back and skip it;
* one decoder layer of the target's width whose q, k and v projections read 2·d inputs
  (the token embedding concatenated with the fused feature): d·(q + 2·kv) parameters more than a plain
  layer, priced as the ``eagle3_embed_qkv`` operator;
* its own LM head over a reduced draft vocabulary V_d (32000 in the released heads,
  ``eagle/traineagle3/config.json``), mapped to target ids by a table (``d2t``): logits cost
  2·d·V_d per token instead of 2·d·V;
* the target's token embedding (a gather, shared, not counted in the head's weights).

The head's layer is a dense Llama layer: an MoE target's head has a dense FFN of the target's
``d_ff``, an MLA target's head plain attention with the target's heads; no attention window.

Weights: params = attention + d·(q + 2·kv) + FFN + 3·d·d (fc) + V_d·d (LM head) + 4·d (three layer
norms and the final norm). The head runs on the target's tensor-parallel group (its GEMMs split like
the target's; the fc is replicated on every rank, as its input is the gathered feature), whole on one
pipeline stage.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from costmodel.engine.execution import Exec
from costmodel.engine.ops import gemm
from costmodel.inputs.fields import EAGLE3_DRAFT_VOCAB
from costmodel.inputs.model import Model


def eagle3_vocab(target: Model, draft_vocab_size: int | None = None) -> int:
    """V_d: the given draft vocabulary, else min(32000, the target's vocabulary)."""
    return int(draft_vocab_size) if draft_vocab_size is not None else min(EAGLE3_DRAFT_VOCAB, target.vocab_size)


def eagle3_head(target: Model, draft_vocab_size: int | None = None) -> Model:
    """The head as a one-layer dense model of the target's width with V_d tokens in its LM head (the
    2·d-input projections and the fc are :func:`eagle3_ops`)."""
    return dataclasses.replace(
        target, id=f"eagle3-head({target.id})", name="EAGLE-3 head", n_layers=1, n_experts=1,
        experts_per_token=1, n_shared_experts=0, first_dense_layers=0, moe_d_ff=None, moe_layer_freq=1,
        mla=None, attention_window=None, global_layer_every=0, mtp_layers=0,
        vocab_size=eagle3_vocab(target, draft_vocab_size), tied_embeddings=True, published_params=None,
        published_active_params=None, source="EAGLE-3 (arXiv:2503.01840) draft head")


def eagle3_params(target: Model, draft_vocab_size: int | None = None) -> int:
    """The head's own weights (module docstring): attention + d·(q + 2·kv) + dense FFN + 3·d² + V_d·d + 4·d."""
    h = eagle3_head(target, draft_vocab_size)
    d = h.d_model
    return (h.attn_params_per_layer + d * (h.q_dim + 2 * h.kv_dim) + h.dense_ffn_params + 3 * d * d
            + h.vocab_size * d + 4 * d)


def eagle_ops(head_ex: Exec, tokens) -> list:
    """An EAGLE (EAGLE-1) head pass's operator besides its decoder layer: the 2d → d fusion layer of the
    feature and the token embedding, over every token the pass drafts from, on every pass
    (:func:`costmodel.engine.strategies.tree.eagle_fuse_op`; the chain and the tree price it alike)."""
    from costmodel.engine.strategies.tree import eagle_fuse_op
    return [eagle_fuse_op(head_ex, tokens)]


def eagle3_ops(head_ex: Exec, tokens, fused_tokens) -> list:
    """The operators an EAGLE-3 pass adds to a one-layer pass of :func:`eagle3_head`: the embedding
    half of the 2·d-input q/k/v projections over ``tokens`` (split over tp like q, k, v), and the
    3·d × d ``fc`` over ``fused_tokens`` (replicated; 0 on passes that feed the head's own output)."""
    m = head_ex.model
    d = m.d_model
    width = (m.q_dim + 2 * m.kv_dim) / head_ex.tp
    ops = [gemm("eagle3_embed_qkv", d * width, tokens, d, width, head_ex, count=1)]
    if np.any(np.asarray(fused_tokens) > 0):
        ops.append(gemm("eagle3_fc", 3.0 * d * d, fused_tokens, 3 * d, d, head_ex, count=1))
    for op in ops:
        op.group = "draft"
    return ops


def head_exec(ex: Exec, kind: str, draft_vocab_size: int | None = None) -> Exec:
    """The Exec of an EAGLE (``eagle``) or EAGLE-3 (``eagle3``) head on the target's devices: split over
    the target's tp, whole on one pipeline stage (pp = 1: its one layer is not divided among stages)."""
    from costmodel.engine.strategies.tree import eagle_exec
    if kind == "eagle3":
        return dataclasses.replace(ex, model=eagle3_head(ex.model, draft_vocab_size), pp=1)
    return eagle_exec(ex)


def head_weights_bytes(ex: Exec, kind: str, draft_vocab_size: int | None = None) -> float:
    """A head's weights on one device of the target's group, its GEMMs split over tp as its passes
    split them: EAGLE-3 (params − 3·d²)/tp + 3·d² (the fc replicated); EAGLE params/tp."""
    if kind == "eagle3":
        fc = 3.0 * ex.model.d_model ** 2
        return ((eagle3_params(ex.model, draft_vocab_size) - fc) / ex.tp + fc) * ex.w_bytes
    from costmodel.engine.strategies.tree import eagle_extra_params
    return eagle_extra_params(ex.model) * ex.w_bytes / ex.tp


def head_weights_total_bytes(ex: Exec, kind: str, draft_vocab_size: int | None = None) -> float:
    """A head's weights over the tp devices that hold it: EAGLE-3 (params − 3·d² + tp·3·d²)·w_bytes
    (each rank keeps its own copy of the fc); EAGLE params·w_bytes (split, nothing replicated)."""
    if kind == "eagle3":
        fc = 3.0 * ex.model.d_model ** 2
        return (eagle3_params(ex.model, draft_vocab_size) - fc + ex.tp * fc) * ex.w_bytes
    from costmodel.engine.strategies.tree import eagle_extra_params
    return eagle_extra_params(ex.model) * ex.w_bytes
