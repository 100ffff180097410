"""Collectives and hand-offs between devices: tensor parallel, pipeline parallel, draft placement.

Full write-up with worked numbers: docs/parallelism.md. α = a link's latency, β = its bandwidth
(bytes/s per direction), both from the hardware YAML's ``interconnect`` block.

**Device layout.** A target on n = tp·pp devices numbers them stage-major: pipeline stage s holds
devices s·tp … s·tp + tp − 1, and device i sits on node ⌊i / devices_per_node⌋. Two devices talk
over ``scale_up`` (NVLink, xGMI; PCIe on parts without a fabric) when they share a node and over
``network`` otherwise. A collective whose group spans nodes runs at the network's α and β (its
slowest hop sets the pace of every synchronised step).

**Tensor parallel.** Two all-reduces per layer of S = tokens · d_model · act_bytes (after the
attention output projection and after the FFN), over the TP group's link. NCCL's (RCCL's) ring and
tree run at β_c, the link's measured all-reduce bus bandwidth (``collective_bandwidth_bytes_per_s``:
nccl-tests ``all_reduce_perf`` busbw at large messages, e.g. 231.6 of 300 GB/s on 8×A100 NVSwitch;
NCCL's protocol overhead and, over PCIe, the host bridges); the peer-to-peer kernels (one-shot,
two-shot) and point-to-point sends run at the datasheet β (plain loads/stores and copies, no NCCL
protocol; their small messages are α-bound):

    ring (Patarasuk & Yuan 2009; NCCL ring):      t = 2(n − 1)·α + 2(n − 1)/n · S/β_c
    tree (NCCL double binary tree):              t = 2·log2(n)·α + 2·S/β_c
    auto (the default of a record's ``allreduce_algorithm``; what NCCL's tuner does: per message,
          the algorithm with the lower modelled time):
                                                  t = min(ring, tree)   — tree below S ≈ 32·α·β_c at n = 8
    one-shot (peer-to-peer kernel: every rank reads the n − 1 peers' whole buffers over its own
          links in parallel, then reduces locally; priced with one synchronisation α):
                                                  t = α + (n − 1)·S/β
    two-shot (peer-to-peer reduce-scatter, then all-gather of the reduced slices):
                                                  t = 2·α + 2(n − 1)/n · S/β
    custom (vLLM's custom all-reduce, csrc/custom_all_reduce.cuh, also SGLang's; a runtime's
          ``tp_allreduce``): one-shot at n = 2 and, on a fully connected fabric, below 512 KiB at
          n ≤ 4 and below 256 KiB at n ≤ 8, two-shot above, up to its 8 MiB buffer; beyond that, for
          n not in (2, 4, 6, 8), across nodes, or on more than two GPUs without a fully connected
          fabric (PCIe, bridges) the runtime falls back to NCCL (auto)

``tokens`` is every query token of the pass: B for plain decoding, B·(γ+1) for chain
verification, B·(T+1) for a tree of T nodes — a tree verified across nodes pays its all-reduces on
every tree token.

**Pipeline parallel.** One forward pass of one micro-batch of ``tokens`` query tokens crosses the
pp − 1 stage boundaries, and the sampled token ids go back from the last stage to the first:

    hand-offs     H = Σ_{k=1}^{pp−1} (α_k + tokens · d_model · act_bytes / β_k)  +  (α_r + lm_tokens · 4 B / β_r)

(each TP rank sends its full activation to the same rank of the next stage, all ranks in
parallel). With balanced stages of time T_stage(b) for a micro-batch of b sequences, the per-step
latency (time between two tokens of one sequence) with m micro-batches in flight is

    T_step(m) = max(m · T_stage(B/m),  pp · T_stage(B/m) + H)        (:func:`pipeline_step_latency_s`)

and each device idles a fraction 1 − m·T_stage/T_step of the step (the bubble,
:func:`pipeline_bubble_fraction`). ``costmodel.evaluate`` prices m = 1 — the whole batch moves
through the stages together: T_step = pp·T_stage(B) + H = (the full model's pass on one TP group)
+ H, and a fraction ≈ (pp − 1)/pp of every device's time is bubble. At small batch that is also
the best schedule (m ≤ B, and a memory-bound T_stage(B/m) ≈ T_stage(B)); micro-batching only pays
when stages are compute-bound, which costmodel does not yet price (see docs/parallelism.md).

**Expert parallel** (``expert_parallel`` = ep > 1, every device of a stage): the routed experts
are split over the ep devices (E/ep whole experts each). Attention follows ``tensor_parallel``:
tp = ep is vLLM's ``--tensor-parallel-size N --enable-expert-parallel`` (attention split by heads,
every device holds every token, the experts' outputs summed by the layer's all-reduce: no
all-to-all); tp < ep is SGLang's DP attention (``--enable-dp-attention --dp N``, and vLLM's
``--data-parallel-size``): dp = ep/tp attention groups each run 1/dp of the batch with their own
KV, and every MoE layer moves tokens to their experts and back by two all-to-alls
(:func:`alltoall_time_s`, over the scale-up fabric when the stage sits in one node).

**Draft placement** (:func:`draft_link`): ``separate_node`` talks over the network;
``separate_device`` over the scale-up fabric when the target leaves a free device in its node,
otherwise the draft's device is on another node and the network is used.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.fast.arrays import broadcast_shape
from costmodel.inputs.hardware import Hardware, HardwareStack, Link

ALGORITHMS = ("auto", "ring", "tree", "custom")
#: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh, vllm/distributed/device_communicators/
#: custom_all_reduce.py): its IPC buffer (max_size 8 MiB), the ranks it supports, and the message size
#: below which it runs one-shot at a world size (n ≤ 4: 512 KiB, n ≤ 8: 256 KiB)
CUSTOM_MAX_BYTES = 8 * 2 ** 20
CUSTOM_RANKS = (2, 4, 6, 8)
CUSTOM_ONESHOT_BYTES = ((4, 512 * 2 ** 10), (8, 256 * 2 ** 10))
#: words of a link type that mark a fabric where every GPU of the node reaches every other directly
#: (NVSwitch, xGMI full mesh, NVL72 trays): the custom kernel needs that above two ranks
FULL_MESH_WORDS = ("nvswitch", "fully connected", "nvl72", "all-to-all")
#: words of a link type that carry GPU peer-to-peer traffic at all (two ranks: PCIe P2P or a bridge)
PEER_WORDS = ("nvlink", "pcie", "infinity fabric", "xgmi")
TOKEN_ID_BYTES = 4.0          # int32 token ids


def allreduce_time_s(message_bytes, n: int, link: Link, algorithm: str = "ring"):
    """Time of one all-reduce of ``message_bytes`` across ``n`` devices over ``link``.

    ring: 2(n−1)·α + 2(n−1)/n · S/β_c;  tree (double binary tree): 2·log2(n)·α + 2·S/β_c, with β_c the
    link's measured all-reduce bus bandwidth (``Link.collective_beta_bytes_per_s``: nccl-tests busbw at large
    messages, the datasheet rate where none is recorded; the tree takes the ring's measured figure, as
    no tree busbw is recorded: it wins only where α dominates);
    auto: the smaller of the two for each message (NCCL picks its algorithm per message size);
    custom: the runtime's peer-to-peer kernel where it applies (:func:`custom_allreduce_s`), else auto;
    0 for n = 1.
    """
    s = np.asarray(message_bytes, dtype=float)
    single = np.less_equal(n, 1)
    if np.all(single):
        return np.zeros_like(s)
    if np.any(single):                      # a sweep's array of device counts with one device among them:
        several = np.greater(n, 1)          # each count > 1 priced as alone (2 stands in for 1), 0 for 1
        return np.where(several, _allreduce_several_s(s, np.where(several, n, 2), link, algorithm), 0.0)
    return _allreduce_several_s(s, n, link, algorithm)


def _allreduce_several_s(s, n, link: Link, algorithm: str):
    """:func:`allreduce_time_s` of ``s`` (float bytes) where every count ``n`` is above 1."""
    if algorithm == "custom":
        nccl = _allreduce_several_s(s, n, link, "auto")
        if not custom_allreduce_applies(n, link):
            return nccl
        return np.where(s <= CUSTOM_MAX_BYTES, custom_allreduce_s(s, n, link), nccl)
    if algorithm == "auto":
        return np.minimum(_allreduce_several_s(s, n, link, "ring"), _allreduce_several_s(s, n, link, "tree"))
    if algorithm == "tree":
        return 2.0 * np.log2(n) * link.latency_s + 2.0 * s / link.collective_beta_bytes_per_s
    if algorithm != "ring":
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
    return 2.0 * (n - 1) * link.latency_s + 2.0 * (n - 1) / n * s / link.collective_beta_bytes_per_s


def custom_allreduce_applies(n: int, link: Link) -> bool:
    """Whether vLLM's custom all-reduce runs for a TP group of ``n`` ranks over ``link``: n in
    ``CUSTOM_RANKS``, and either two ranks with peer-to-peer access (PCIe, NVLink bridge, xGMI) or a fully
    connected fabric (``FULL_MESH_WORDS`` in the link's type); a network link (the group spans nodes)
    never. vLLM disables it otherwise ('not supported on more than two PCIe-only GPUs')."""
    kind = str(link.type).lower()
    if not np.all(np.isin(n, CUSTOM_RANKS)):
        return False
    if any(w in kind for w in FULL_MESH_WORDS):
        return True
    return int(np.max(n)) == 2 and any(w in kind for w in PEER_WORDS)


def custom_allreduce_s(message_bytes, n: int, link: Link):
    """vLLM's custom all-reduce of ``message_bytes`` over ``n`` ranks of a peer-to-peer fabric:

        one-shot (n = 2, or S below CUSTOM_ONESHOT_BYTES of n):  t = α + (n − 1)·S/β
        two-shot (above):                              t = 2·α + 2(n − 1)/n · S/β

    One-shot: each rank reads all n − 1 peers' full buffers at once, each over its own link (β is
    the device's aggregate scale-up bandwidth), after one flag barrier (α). Two-shot: a reduce-scatter
    (each rank reads its 1/n slice from every peer) and an all-gather of the reduced slices, two
    barriers. Cross-check on MI300X (α = 8 µs, β = 448 GB/s, xGMI mesh): a 16 KiB one-shot at n = 4
    prices 8 + 3·16384/448e9 s = 8.1 µs; SGLang PR 6619 measures its custom all-reduce (vLLM's
    kernel) at 7.26 µs for 16 KB on 4 MI300X. Known to be low on H100 (not yet priced): vLLM's
    benchmark_device_communicators (10 all-reduces in one CUDA graph) measures one-shot 10 / 14 / 23 /
    38 µs at 0.5 / 1 / 2 / 4 MB on 4 H100s (vllm-project/vllm#24532) against 5.4 / 8.8 / 15.8 / 29.8 µs
    here (the slope matches; the kernel has a start and an end barrier, not one α), and two-shot
    15 / 17 / 26 / 37 µs on 6 (vllm-project/vllm#24111), a slope of ~261 GB/s, not β = 450."""
    s = np.asarray(message_bytes, dtype=float)
    alpha, beta = link.latency_s, link.bandwidth_bytes_per_s
    limit = dict(CUSTOM_ONESHOT_BYTES)[4 if int(np.max(n)) <= 4 else 8]
    one = alpha + (n - 1) * s / beta
    two = 2.0 * alpha + 2.0 * (n - 1) / n * s / beta
    return np.where((s < limit) | np.equal(n, 2), one, two)


def alltoall_time_s(tokens, k: int, ep: int, d_model: int, elem_bytes: float, link: Link):
    """One MoE all-to-all (dispatch or combine) over ``ep`` devices, for the ``tokens`` one device sends.

    Each token goes to the devices of its k routed experts; with routing uniform over experts a
    fraction (ep − 1)/ep of the k copies leave the device, so it sends (and, symmetrically, receives)

        S = tokens · k · (ep − 1)/ep · d_model · elem_bytes,     t = α + S/β

    one latency: every peer is sent to at once (DeepEP's and NCCL's all-to-all post all sends
    together). 0 for ep = 1. Cross-check, DeepEP README (deepseek-ai/DeepEP, low-latency kernels,
    H800 + CX7 400 Gb/s RDMA, 128 tokens per rank, hidden 7168, top-8, FP8 dispatch): EP8 dispatch
    77 µs — 128 · 8 · 7168 · 1 B = 7.3 MB in 77 µs = 95 GB/s, their quoted 98 GB/s; the normal
    intranode kernels reach 153 GB/s of the H800's ~160 GB/s NVLink."""
    t = np.asarray(tokens, dtype=float)
    if ep <= 1:
        return np.zeros_like(t)
    s = t * k * (ep - 1) / ep * d_model * elem_bytes
    return link.latency_s + s / link.bandwidth_bytes_per_s


def transfer_time_s(message_bytes, link: Link):
    """Point-to-point send: α + S / β."""
    return link.latency_s + np.asarray(message_bytes, dtype=float) / link.bandwidth_bytes_per_s


# ----------------------------------------------------------------------------- placement

def node_of(device: int, devices_per_node: int) -> int:
    """Node of device ``device`` (devices numbered 0.. in node order)."""
    return device // max(int(devices_per_node), 1)


def _per_device(hw, pick) -> Link:
    """``pick(device)`` for each device of a :class:`~costmodel.inputs.hardware.HardwareStack`, as one
    Link whose α and β are arrays of the stack's shape (each device's own link's figures)."""
    links = [pick(m) for m in hw.members]
    return Link(type=links[0].type,
                bandwidth_bytes_per_s=np.asarray([x.bandwidth_bytes_per_s for x in links], dtype=float).reshape(hw.shape),
                latency_s=np.asarray([x.latency_s for x in links], dtype=float).reshape(hw.shape),
                collective_bandwidth_bytes_per_s=np.asarray([x.collective_beta_bytes_per_s for x in links],
                                                            dtype=float).reshape(hw.shape))


def _per_element(hw, n, pick) -> Link:
    """``pick(device, count)`` for every element of the device counts ``n`` (an array) and of the
    devices (a :class:`~costmodel.inputs.hardware.HardwareStack`, or one device), as one Link whose
    α and β are arrays of their broadcast shape."""
    stack = isinstance(hw, HardwareStack)
    members, hshape = (hw.members, hw.shape) if stack else ((hw,), ())
    shape = broadcast_shape(hshape, np.shape(n))
    # element by element in C order (np.ndindex's), as Python ints; each (device, count) picked once
    which = np.broadcast_to(np.arange(len(members)).reshape(hshape) if stack else 0, shape).ravel().tolist()
    counts = np.broadcast_to(n, shape).ravel().tolist()
    picked: dict = {}
    links = []
    for j, c in zip(which, counts):
        c = int(c)
        got = picked.get((j, c))
        if got is None:
            got = picked[(j, c)] = pick(members[j], c)
        links.append(got)
    return Link(type=links[0].type,
                bandwidth_bytes_per_s=np.asarray([x.bandwidth_bytes_per_s for x in links], dtype=float).reshape(shape),
                latency_s=np.asarray([x.latency_s for x in links], dtype=float).reshape(shape),
                collective_bandwidth_bytes_per_s=np.asarray([x.collective_beta_bytes_per_s for x in links],
                                                            dtype=float).reshape(shape))


def _link_between(hw: Hardware, pairs) -> Link:
    """The network if any (a, b) pair sits on different nodes, else the scale-up fabric (for a
    stack of devices, each device's own choice)."""
    if isinstance(hw, HardwareStack):
        return _per_device(hw, lambda m: _link_between(m, pairs))
    dpn = hw.devices_per_node
    return hw.network if any(node_of(a, dpn) != node_of(b, dpn) for a, b in pairs) else hw.scale_up


def tp_link(hw: Hardware, tp: int, pp: int = 1) -> Link:
    """Link of the TP all-reduces: the network when any stage's TP group (devices s·tp … s·tp+tp−1)
    spans nodes — always when tp > devices_per_node — else the scale-up fabric."""
    if np.ndim(tp):
        return _per_element(hw, tp, lambda h, t: tp_link(h, t, pp))
    if tp <= 1:
        return hw.scale_up
    return _link_between(hw, [(s * tp, s * tp + tp - 1) for s in range(pp)])


def pp_boundary_links(hw: Hardware, tp: int, pp: int) -> list:
    """Link of each of the pp − 1 stage boundaries: boundary k (stage k−1 → k) pairs device
    (k−1)·tp + j with k·tp + j for every TP rank j; the network if any pair crosses nodes."""
    return [_link_between(hw, [((k - 1) * tp + j, k * tp + j) for j in range(tp)]) for k in range(1, pp)]


def pp_return_link(hw: Hardware, tp: int, pp: int) -> Link:
    """Link that carries the sampled token ids from the last stage back to the first."""
    return _link_between(hw, [((pp - 1) * tp + j, j) for j in range(tp)])


def pipeline_handoff_s(tokens, lm_tokens, d_model: int, act_bytes: float, hw: Hardware, tp: int, pp: int):
    """H: the pp − 1 activation hand-offs of one pass plus the token-id return (module docstring).

    Each boundary moves tokens · d_model · act_bytes (α_k + S/β_k over its own link); the last stage
    returns lm_tokens · 4 B of sampled ids to the first. 0 when pp = 1.
    """
    t = np.asarray(tokens, dtype=float)
    if pp <= 1:
        return np.zeros_like(t)
    act = t * d_model * act_bytes
    total = sum(transfer_time_s(act, link) for link in pp_boundary_links(hw, tp, pp))
    ids = np.asarray(lm_tokens, dtype=float) * TOKEN_ID_BYTES
    return total + transfer_time_s(ids, pp_return_link(hw, tp, pp))


def pipeline_step_latency_s(stage_s, pp: int, m: int = 1, handoff_s=0.0):
    """Per-step latency of a pipeline of ``pp`` balanced stages with ``m`` micro-batches in flight.

        T_step = max(m · T_stage,  pp · T_stage + H)

    ``stage_s`` = T_stage(B/m), one stage's time for one micro-batch; ``handoff_s`` = H, the
    micro-batch's hand-offs (:func:`pipeline_handoff_s`). The first term: a stage serves all m
    micro-batches per step; the second: one micro-batch's round trip through every stage.
    m = 1 is what :func:`costmodel.evaluate` prices (pp·T_stage + H = the full model's pass + H).
    """
    st = np.asarray(stage_s, dtype=float)
    return np.maximum(m * st, pp * st + np.asarray(handoff_s, dtype=float))


def pipeline_bubble_fraction(stage_s, pp: int, m: int = 1, handoff_s=0.0):
    """Fraction of each device's step spent idle: 1 − m · T_stage / T_step(m).

    m = 1 with free hand-offs gives (pp − 1)/pp; m ≥ pp + H/T_stage gives 0 (the pipeline is full).
    """
    st = np.asarray(stage_s, dtype=float)
    return 1.0 - m * st / pipeline_step_latency_s(st, pp, m, handoff_s)


def draft_link(hw: Hardware, n_target_devices: int, placement: str) -> Link | None:
    """Link between a draft on its own device and the target (None for ``same_device``).

    ``separate_node``: the network. ``separate_device``: the scale-up fabric when the target's
    n devices leave a free device in its node (n < devices_per_node), otherwise the draft sits on
    another node and talks over the network.
    """
    if placement == "same_device":
        return None
    if isinstance(hw, HardwareStack):
        return _per_device(hw, lambda m: draft_link(m, n_target_devices, placement))
    if placement == "separate_node" or n_target_devices >= hw.devices_per_node:
        return hw.network
    return hw.scale_up


def divisors(n: int) -> list:
    """Positive divisors of n, ascending (TP degrees must divide the heads, PP degrees the layers)."""
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def kv_transfer_link(hw: Hardware, devices_per_instance: int) -> Link:
    """Link between a prefill instance and a decode instance of ``devices_per_instance`` devices
    each (disaggregated serving): the scale-up fabric when both fit in one node, else the network."""
    return hw.link_for(2 * devices_per_instance)


def kv_transfer_s(kv_bytes, hw: Hardware, tp: int, pp: int = 1):
    """Time to move one request's KV cache (``kv_bytes`` over the whole instance) from the prefill
    instance to a decode instance: every device sends its own shard to its counterpart at the same
    time, so one message of kv_bytes / (tp·pp) over :func:`kv_transfer_link`: α + S/β."""
    return transfer_time_s(np.asarray(kv_bytes, dtype=float) / (tp * pp), kv_transfer_link(hw, tp * pp))
