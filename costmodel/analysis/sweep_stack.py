"""Categorical axes priced as arrays: the ``hardware`` axis as a
:class:`~costmodel.inputs.hardware.HardwareStack` (device numbers as arrays along its dimension)
and the ``n_devices`` axis as an array of device counts, so that one block of the sweep covers every
device and device count the engine prices alike (:func:`costmodel.engine.evaluate.hardware_signature`;
one device with the larger counts, its all-reduce 0 s); the ``weight_dtype`` axis as a
:class:`~costmodel.inputs.dtypes.WeightDtypes` where its values share a
:func:`~costmodel.inputs.dtypes.stack_signature` (:func:`stack_dtypes`); and the ``model`` axis as a
:class:`~costmodel.inputs.model.ModelStack` where its models share a
:func:`~costmodel.inputs.model.model_signature` (:func:`stack_model_blocks`). Used by
:func:`costmodel.analysis.sweep_grid.group_blocks` and :func:`costmodel.analysis.sweep._plan`."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from costmodel.analysis.sweep_grid import TREE_LOOP, Axis, Block, canonical_value
from costmodel.analysis.sweep_parse import _PARSED, _any_row, _label, _parse, parse_one_changed, refusal_one_changed
from costmodel.engine.evaluate import _execs, allreduce_for, hardware_signatures, record_tail
from costmodel.errors import InputError
from costmodel.inputs import dtypes
from costmodel.inputs.dtypes import WeightDtypes
from costmodel.inputs.fields import DRAFT_KINDS
from costmodel.inputs.model import ModelStack, load_model, model_signature
from costmodel.inputs.record import with_fields


def device_runs(base: dict, axes: list[Axis], index: dict, hw, nd: Axis, strict: bool):
    """(blocks, the n_devices value indices left to price one by one): contiguous runs of two or more
    device counts whose records parse and that the engine prices alike (tensor parallel over the n
    devices, one pipeline stage, no draft device of its own: ``n_devices_total`` would differ) become
    blocks with the device counts as an array. One device joins the larger counts (its all-reduce is
    0 s element by element: ``engine.parallel.allreduce_time_s``) except under the custom all-reduce,
    which decides on the stack's link type once for every count."""
    group = [a for a in axes if not a.numeric]
    first = {a.name: a.values[0] for a in axes if a.numeric}
    gvals = _group_values(group, index, hw, nd, 0)
    recs = []
    rec0 = None                       # the first count's record, the others parsed from it (one field)
    for j in range(len(nd.raw)):
        g = gvals(0, j)
        d, pairs = {**base, **g, **first}, list(g.items())
        try:
            if rec0 is None:
                rec0 = _parse(d, pairs)
            r = parse_one_changed(rec0, "n_devices", d, pairs, execs=True)
        except InputError:
            r = None
        ok = r is not None and r.tensor_parallel is None and r.pipeline_parallel == 1 and \
            (r.expert_parallel or 1) == 1 and \
            r.strategy in ("autoregressive", "speculative", "shared_prefix") and \
            (r.draft_placement == "same_device" or r.draft_model in ("none", "medusa", "self"))
        recs.append(None if not ok else "one" if r.n_devices == 1 and _custom_allreduce(r) else "tp")
    blocks, left, j = [], [], 0
    while j < len(recs):
        k = j
        while k + 1 < len(recs) and recs[j] is not None and recs[k + 1] == recs[j]:
            k += 1
        got = stacked_blocks(base, axes, index, hw, strict, (nd, list(range(j, k + 1)))) if k > j else None
        if got is None:
            left.extend(range(j, k + 1))
        else:
            blocks.extend(got)
        j = k + 1
    return blocks, left


def _custom_allreduce(rec) -> bool:
    from costmodel.inputs.runtime import load_runtime
    return allreduce_for(rec, load_runtime(rec.runtime)) == "custom"


def stacked_blocks(base: dict, axes: list[Axis], index: dict, hw, strict: bool = True, run=None):
    """The blocks of one group with every ``hardware`` value (``hw``, its axis, or None) and the
    device counts of ``run`` ((``n_devices`` axis, contiguous value indices) or None) priced
    together: one block per set of devices the engine treats alike
    (:func:`costmodel.engine.evaluate.hardware_signature`), its devices a
    :class:`~costmodel.inputs.hardware.HardwareStack` and its device counts an array when evaluated.
    None when the group is not stacked: its record is refused, a device does not load, or it is
    searched row by row. A group refused for every device (they all load) is marked device by
    device, each with its own first row's message."""
    group = [a for a in axes if not a.numeric]
    numeric = [a for a in axes if a.numeric]
    first = {a.name: a.values[0] for a in numeric}
    nd, counts = run if run is not None else (None, [None])
    n_hw = 1 if hw is None else len(hw.raw)

    gvals = _group_values(group, index, hw, nd, counts[0])

    def devices_in(mode):
        if hw is None:
            return [None]
        return _devices(hw.raw, mode)

    try:
        rec = _parse({**base, **gvals(0), **first}, list(gvals(0).items()), execs=True)
        devices = devices_in(rec.power_mode)
    except InputError:
        if strict or run is not None or hw is None:
            return None                   # the group by group path raises its first row's error
        got = _first_valid_row(base, numeric, first, index, n_hw, gvals, devices_in)
        if got is None or isinstance(got, list):
            return got
        rec, devices = got
    if rec.strategy == "tree" and rec.tree_shape == "optimal_for_hardware":
        return None
    # the run's other device counts (device_runs parsed them with their Execs: looked up)
    ns = [rec.n_devices] + [parse_one_changed(rec, "n_devices", {**base, **gvals(0, c), **first},
                                              list(gvals(0, c).items()), execs=True).n_devices for c in counts[1:]]
    loop = [a for a in numeric if a.name in TREE_LOOP] if rec.strategy == "tree" else []
    vec = [a.name for a in axes if a is hw or a is nd or (a.numeric and a not in loop)]
    blocks = []
    for members in _by_signature(rec, devices).values():
        g = gvals(members[0])
        for lidx in itertools.product(*(range(len(a.values)) for a in loop)):
            lvals = {a.name: a.values[i] for a, i in zip(loop, lidx)}
            pairs = list(g.items()) + list(lvals.items())
            try:
                r = _parse({**base, **g, **first, **lvals}, pairs) if loop else rec
            except InputError:
                return None                # refused looped values: group by group, as given
            m = {} if hw is None else {"hardware": members}
            if nd is not None:
                m["n_devices"] = list(counts)
            blocks.append(Block(r, {**index, **dict(zip((a.name for a in loop), lidx))}, vec, label=_label(pairs),
                                members=m, stack=() if hw is None else tuple(devices[j] for j in members),
                                counts=tuple(ns) if nd is not None else ()))
    _canonical_values(group, index, rec, hw, nd, counts, ns)
    return blocks


def _group_values(group: list, index: dict, hw, nd, c0):
    """``gvals(j, c=c0)``: the group's values (in axis order, a label's order) with the ``hw`` axis at
    value j and the ``nd`` axis at value c; the others at ``index``."""
    template = {a.name: None if a is hw or a is nd else a.raw[index[a.name]] for a in group}

    def gvals(j, c=c0):
        g = dict(template)
        if hw is not None:
            g[hw.name] = hw.raw[j]
        if nd is not None:
            g[nd.name] = nd.raw[c]
        return g
    return gvals


def _devices(raw: list, mode) -> list:
    """The devices of a ``hardware`` axis in power mode ``mode``, loaded once per plan (the plan's
    lookup, :data:`costmodel.analysis.sweep_parse._PARSED`); a device that does not load raises."""
    from costmodel.inputs.hardware import load_hardware

    memo = _PARSED.get()
    try:
        key = ("devices", tuple(raw), mode)
        hit = None if memo is None else memo.get(key)
    except TypeError:                 # an unhashable mode: loaded every time
        memo = hit = None
    if hit is None:
        hit = [load_hardware(v.strip(), mode.strip() if isinstance(mode, str) else mode) for v in raw]
        if memo is not None:
            memo[key] = hit
    return hit


def _by_signature(rec, devices: list) -> dict:
    """{signature: indices of the devices the engine prices alike for ``rec``} (one group, None, when
    the sweep has no hardware axis)."""
    parts: dict = {}
    sigs = [None] * len(devices) if devices[0] is None else hardware_signatures(rec, devices)
    for j, s in enumerate(sigs):
        parts.setdefault(s, []).append(j)
    return parts


def _first_valid_row(base: dict, numeric: list, first: dict, index: dict, n_hw: int, gvals, devices_in):
    """A non-strict sweep whose group's first row is refused: (a row's record that parses, the devices
    loaded for it); when no row parses, the blocks marking each device's rows refused with its own
    first row's message; None when the group must go group by group (a device does not load, or a
    device's first row parses after all)."""
    try:
        devices_in({**base, **gvals(0)}.get("power_mode"))
    except (InputError, TypeError, AttributeError):
        return None
    rec = _any_row(base, gvals(0), numeric)
    if rec is None:                   # no row parses: refused for every device alike
        try:                          # its first row's record (refused when its Exec is built)
            rec0 = _parse({**base, **gvals(0), **first}, list(gvals(0).items()))
        except InputError:
            rec0 = None
        blocks = []
        for j in range(n_hw):
            g = gvals(j)
            pairs = list(g.items())
            label = _label(pairs)
            if rec0 is None or j == 0:
                try:
                    _parse({**base, **g, **first}, pairs, execs=True)
                    return None
                except InputError as exc:
                    why = str(exc)
            else:                     # the same mapping with another device: one field parsed
                why = refusal_one_changed(rec0, "hardware", {**base, **g, **first}, pairs, label)
                if why is None:
                    return None
            blocks.append(Block(None, {**index, "hardware": j}, [], label=label, invalid=why))
        return blocks
    return rec, devices_in(rec.power_mode)


def _canonical_values(group: list, index: dict, rec, hw, nd, counts, ns) -> None:
    """Write back the axis values as the record canonicalises them: the group's open values, the
    hardware ids (stripped) and the run's device counts."""
    for a in group:
        i = index.get(a.name)
        if i is not None and a.values[i] is None:
            a.values[i] = canonical_value(getattr(rec, a.name))
    if hw is not None:
        hw.values = [v.strip() if c is None else c for v, c in zip(hw.raw, hw.values)]
    if nd is not None:
        for c, n in zip(counts, ns):
            nd.values[c] = canonical_value(n)


def stack_dtypes(blocks: list, axes: list[Axis]) -> list:
    """``blocks`` with each run of blocks that differ only in their ``weight_dtype`` value merged into
    one block whose ``weight_dtype`` is a member axis (contiguous value indices of one
    :func:`~costmodel.inputs.dtypes.stack_signature`, each member's record built and its Exec's
    dtype figures read without an error); the merged block keeps the first block's record and label
    (the numeric rules do not read the weight dtype, so its first refused row is the first block's)."""
    names = [a.name for a in axes]
    if "weight_dtype" not in names:
        return blocks
    return _merge_runs(blocks, "weight_dtype", _dtype_key, _same_but_dtype,
                       lambda run: _merged(run, names) if len(run) > 1 else run[0])


def _merge_runs(blocks: list, axis: str, key_of, same, merge, alone=None) -> list:
    """``blocks`` with each run of blocks that share ``key_of(b)`` (not None), hold contiguous value
    indices of ``axis`` and agree with the run's first (``same(b, first)``) replaced by
    ``merge(run)``; a block without a key is ``alone(b)`` (itself by default); in the order of each
    run's first block."""
    groups: dict = {}
    out = []                              # (position of the first block it covers, block)
    for pos, b in enumerate(blocks):
        key = key_of(b)
        if key is None:
            out.append((pos, b if alone is None else alone(b)))
        else:
            groups.setdefault(key, []).append((pos, b))
    for members in groups.values():
        members.sort(key=lambda pb: pb[1].index[axis])
        run = [members[0]]
        for pb in members[1:] + [None]:
            if pb is not None and pb[1].index[axis] == run[-1][1].index[axis] + 1 and same(pb[1], run[0][1]):
                run.append(pb)
                continue
            out.append((min(p for p, _b in run), merge([b for _p, b in run])))
            run = [pb]
    return [b for _p, b in sorted(out, key=lambda pb: pb[0])]


def _dtype_key(b):
    """What a block must share with another to be merged along the weight dtype, or None. Its devices
    by identity: the loaded devices are the loaders' cached objects, alive while the blocks are."""
    if b.invalid is not None or b.rowwise or b.rec is None or "weight_dtype" not in b.index or \
            not isinstance(b.rec.weight_dtype, str) or not _dtype_ok(b.rec):
        return None
    index = tuple(sorted((k, v) for k, v in b.index.items() if k != "weight_dtype"))
    members = tuple(sorted((k, tuple(v)) for k, v in b.members.items()))
    return (index, tuple(b.vec), members, b.counts, tuple(id(d) for d in b.stack),
            dtypes.stack_signature(b.rec.weight_dtype))


def _dtype_ok(rec) -> bool:
    """The record's weight dtype stacks: it has a signature, and its Execs' dtype figures build."""
    if dtypes.stack_signature(rec.weight_dtype) is None:
        return False
    try:
        for ex in _execs(rec):
            if ex is not None:
                (ex.w_bytes, ex.lm_head_w_bytes, ex.embedding_w_bytes, ex.act_bytes, ex.dequant_flops_per_weight,
                 ex.compute_dtype, ex.quantised)
    except InputError:
        return False
    return True


def _same_but_dtype(b, first) -> bool:
    return with_fields(b.rec, weight_dtype=first.rec.weight_dtype) == first.rec


def _merged(run: list, names: list, axis: str = "weight_dtype"):
    """One block for a run of blocks (one or more) that differ only in their ``axis`` value
    (``weight_dtype`` or ``model``): that axis a member axis, its values the run's, in order."""
    first = run[0]
    vec = set(first.vec) | {axis}
    values = tuple(getattr(b.rec, axis) for b in run)
    return Block(first.rec, {k: v for k, v in first.index.items() if k != axis},
                 [n for n in names if n in vec], label=first.label,
                 members={**first.members, axis: [b.index[axis] for b in run]},
                 stack=first.stack, counts=first.counts,
                 dtypes=values if axis == "weight_dtype" else first.dtypes,
                 models=values if axis == "model" else first.models)


def stack_model_blocks(blocks: list, axes: list[Axis]) -> list:
    """``blocks`` with each run of blocks that differ only in their ``model`` value merged into one
    block whose ``model`` is a member axis: contiguous value indices of models of one
    :func:`~costmodel.inputs.model.model_signature`, with no draft or a draft model of the zoo (not
    a head, the target itself or a schedule of γ), every other field the same. The merged block keeps the first block's
    record and label. Run after the plan has checked each block's rows (a merged block's rows are
    checked as its models' blocks were)."""
    names = [a.name for a in axes]
    if "model" not in names:
        return blocks

    def alone(b):
        # a block priced over arrays gets the model dimension too (one member), so that every
        # block's arrays share one layout and blocks still share passes (engine.pass_memo keys
        # arrays by shape)
        simple = b.invalid is None and not b.rowwise and b.rec is not None and "model" in b.index
        return _merged([b], names, "model") if simple else b

    return _merge_runs(blocks, "model", _model_key,
                       lambda b, first: with_fields(b.rec, model=first.rec.model) == first.rec,
                       lambda run: _merged(run, names, "model"), alone)


#: draft kinds a model stack is not priced with: every named kind but ``none`` (heads and the target
#: itself, whose figures would follow the stack; suffix drafts): a stack has no draft or a draft model
_NOT_STACKED_DRAFTS = tuple(k for k in DRAFT_KINDS if k != "none")


def _model_key(b):
    """What a block must share with another to be merged along the model axis, or None."""
    rec = b.rec
    if b.invalid is not None or b.rowwise or rec is None or "model" not in b.index or \
            not isinstance(rec.model, str) or rec.strategy not in ("autoregressive", "speculative", "shared_prefix", "tree") or \
            rec.gamma_schedule is not None or rec.draft_model in _NOT_STACKED_DRAFTS:
        return None
    try:
        sig = model_signature(load_model(rec.model))
    except InputError:
        return None
    if sig is None:
        return None
    index = tuple(sorted((k, v) for k, v in b.index.items() if k != "model"))
    members = tuple(sorted((k, tuple(v)) for k, v in b.members.items()))
    return (index, tuple(b.vec), members, b.counts, tuple(id(d) for d in b.stack), b.dtypes, sig)


def member_tails(rec, ex, extras: dict, flat, same) -> dict:
    """The record-level keys (notes, ...) of a piece with stacked weight dtypes and/or models: each
    member record's, one value where they agree, else an object array along the members' axes.
    ``ex``: the piece's Exec; a member's Exec is ``ex``'s dtype member (or ``ex``) with the member's
    model, what build_exec gives for the member's record (the members share every decision:
    ``stack_signature``, ``model_signature``). ``flat``, ``same``: the sweep's helpers for
    record-level values."""
    wd, md = rec.weight_dtype, rec.model
    dts = list(zip(wd.members, ex.dtype_members)) if isinstance(wd, WeightDtypes) else [(wd, ex)]
    models = md.members if isinstance(md, ModelStack) else [None]
    stacks = [v for v in (wd, md) if isinstance(v, (WeightDtypes, ModelStack))]
    shape = np.broadcast_shapes(*(v.shape for v in stacks))
    dtype_dim, model_dim = (next((d for d, n in enumerate(v.shape) if n > 1), None)
                            if isinstance(v, (WeightDtypes, ModelStack)) else None for v in (wd, md))
    tails = {}
    for i, (w, e) in enumerate(dts):
        for j, m in enumerate(models):
            pos = [0] * len(shape)
            for dim, k in ((dtype_dim, i), (model_dim, j)):
                if dim is not None:
                    pos[dim] = k
            member = with_fields(rec, weight_dtype=w) if m is None else with_fields(rec, weight_dtype=w, model=m)
            tails[tuple(pos)] = flat(record_tail(member, extras, e if m is None else dataclasses.replace(e, model=m)))
    first = next(iter(tails.values()))
    out = {}
    for k, v in first.items():
        if all(same(t.get(k), v) for t in tails.values()):
            out[k] = v
        else:
            a = np.empty(shape, dtype=object)
            for pos, t in tails.items():
                a[pos] = t.get(k)
            out[k] = a
    return out
