"""The sweep's grid: axis values parsed (lists, ranges, ``"1,8,64"``, ``"16:16000:16"``), the grid
grouped into blocks that share every non-numeric field, each block's numeric arrays shaped to
broadcast, and each block validated on arrays (the first offending row re-parsed so that the
message is :func:`costmodel.inputs.record.parse_record`'s). Used by :mod:`costmodel.analysis.sweep`."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field

import numpy as np

from costmodel.errors import InputError
from costmodel.engine.evaluate import NUMERIC_AXES
from costmodel.inputs import rules
from costmodel.inputs.fields import BY_NAME, FIELD_NAMES
from costmodel.inputs.model import load_model
from costmodel.inputs.record import Record, _empty, convert, parse_record
from costmodel.analysis.sweep_parse import _PARSED, _SOURCE, _any_row, _label, _parse

#: most values one axis may have (a range is counted before its values are built)
MAX_AXIS_VALUES = 1_000_000
#: most rows one grid may have
MAX_GRID_ROWS = 1 << 31
#: memory one collected row needs, with headroom: ~40 columns × 8 bytes in the result, the same
#: again while the columns are assembled, and the CSV/Parquet writer's copy
BYTES_PER_ROW = 1024
LIST_FIELDS = ("rank_acceptance", "tree_parents")
#: fields whose value is read from the record (not the arrays) by a strategy: looped per value there
TREE_LOOP = ("acceptance_rate", "mean_accepted_tokens")

# ----------------------------------------------------------------------------------------- axes

def parse_axis(name: str, spec) -> list:
    """Values of one axis. Python: a list/tuple/range/array (or one scalar). Text (command line):
    ``V1,V2,...``; ``START:STOP[:STEP]`` (STOP included); ``START:STOP:*F`` (geometric, ×F);
    list-valued fields (``rank_acceptance``, ``tree_parents``) separate alternatives with ``|``."""
    if name not in FIELD_NAMES:
        from costmodel.errors import suggest
        raise InputError(f"unknown field{suggest(name, FIELD_NAMES)}", source=_SOURCE, field=name,
                         allowed=", ".join(FIELD_NAMES))
    if isinstance(spec, str):
        return _parse_axis_text(name, spec)
    if isinstance(spec, (range, np.ndarray)):
        return list(np.asarray(spec).tolist()) if isinstance(spec, np.ndarray) else list(spec)
    if isinstance(spec, (list, tuple)):
        if name in LIST_FIELDS and spec and not any(isinstance(v, (list, tuple, str)) for v in spec):
            return [tuple(spec)]          # one list value, not several alternatives
        return list(spec)
    return [spec]


def _parse_axis_text(name: str, text: str) -> list:
    s = text.strip()
    if name in LIST_FIELDS:
        return [p.strip() for p in s.split("|")]
    if "," in s:
        return [p.strip() for p in s.split(",")]
    if s.count(":") in (1, 2):
        parts = s.split(":")
        try:
            start, stop = _range_number(parts[0]), _range_number(parts[1])
        except ValueError:
            return [s]
        if not (math.isfinite(start) and math.isfinite(stop)):
            raise InputError(f"a range needs finite ends, got {_cut(s)}", source=_SOURCE, field=name,
                             allowed="START:STOP with finite numbers, e.g. 1:1024")
        step_txt = parts[2].strip() if len(parts) == 3 else "1"
        geometric = step_txt.startswith(("*", "x"))
        try:
            step = _range_number(step_txt[1:] if geometric else step_txt)
            if not math.isfinite(step):
                raise ValueError(step_txt)
        except ValueError:
            raise InputError(f"bad range step {step_txt!r}", source=_SOURCE, field=name,
                             allowed="START:STOP, START:STOP:STEP or START:STOP:*FACTOR (STOP included)") from None
        if geometric:
            if step <= 1 or start <= 0:
                raise InputError(f"bad geometric range {s!r}", source=_SOURCE, field=name,
                                 allowed="START > 0 and FACTOR > 1, e.g. 1:1024:*2")
            n = int(math.floor(math.log(stop / start) / math.log(step) + 1e-9)) + 1 if stop >= start else 0
            _check_count(name, s, n)
            vals = [start * step ** i for i in range(max(n, 0))]
        else:
            if step <= 0:
                raise InputError(f"range step must be > 0, got {step_txt!r}", source=_SOURCE, field=name)
            count = math.floor((stop - start) / step + 1e-9) + 1 if stop >= start else 0
            _check_count(name, s, count)
            n = int(count)
            vals = [start + step * i for i in range(max(n, 0))]
        if not vals:
            raise InputError(f"empty range {s!r}", source=_SOURCE, field=name, allowed="START <= STOP")
        return [_tidy(v) for v in vals]
    return [s]


def _range_number(text: str) -> float:
    """A range's START/STOP/STEP: ASCII digits only (``float`` would read Arabic-Indic or full-width
    digits), refused with ValueError otherwise."""
    t = text.strip()
    if not t.isascii():
        raise ValueError(t)
    return float(t)


def _cut(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def _check_count(name: str, text: str, count) -> None:
    """A range of more than MAX_AXIS_VALUES values is refused before any value is built."""
    if count > MAX_AXIS_VALUES:
        raise InputError(f"the range {_cut(text)} has {count:.4g} values", source=_SOURCE, field=name,
                         allowed=f"at most {MAX_AXIS_VALUES:,} values per axis (and {MAX_GRID_ROWS:,} rows "
                                 "per grid)")


def _tidy(v: float):
    """0.1·3 → 0.3 (12 significant digits); integral values as int."""
    v = float(f"{v:.12g}")
    return int(v) if v == int(v) and abs(v) < 2 ** 53 else v


def grid_size(**axes) -> int:
    """Number of rows of the grid of ``axes`` (values as for :func:`sweep`)."""
    return math.prod(len(parse_axis(k, v)) for k, v in axes.items())


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), else free physical pages × page size, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_grid(lengths: dict, in_memory: bool = True) -> int:
    """Rows of a grid with axes of ``lengths`` (name -> number of values), refused before any
    evaluation when there is no axis, when it exceeds MAX_GRID_ROWS, or (``in_memory``: the rows
    are collected in this process) when rows × BYTES_PER_ROW exceeds the available memory."""
    if not lengths:
        raise InputError("a sweep needs at least one axis", source=_SOURCE, field="axes",
                         allowed="a field with several values (batch_size=1,8,64) or a range (prompt_len=16:4096:16)")
    rows = math.prod(lengths.values())
    if rows > MAX_GRID_ROWS:
        raise InputError(f"the grid has {rows:.4g} rows ({' × '.join(str(n) for n in lengths.values())})",
                         source=_SOURCE, field=max(lengths, key=lengths.get),
                         allowed=f"at most {MAX_GRID_ROWS:,} rows per grid")
    avail = available_memory_bytes() if in_memory else None
    if avail is not None and rows * BYTES_PER_ROW > avail:
        raise InputError(f"the grid has {rows:,} rows, about {rows * BYTES_PER_ROW / 1e9:.3g} GB in memory, but "
                         f"{avail / 1e9:.3g} GB are available", source=_SOURCE,
                         field=max(lengths, key=lengths.get),
                         allowed="fewer rows, or engine='dask' with an output path (the rows are then never "
                                 "collected in one process)")
    return rows


# ----------------------------------------------------------------------------------------- plan

@dataclass
class Axis:
    name: str
    raw: list                      # values as given
    numeric: bool                  # vectorised (a NUMERIC_AXES field with only numeric values)
    values: list = field(default_factory=list)    # parsed values (numeric) / canonical (filled later)
    refused: dict = field(default_factory=dict)   # value index -> why (on_invalid != "error")


@dataclass
class Block:
    """One evaluate_arrays call site: the record and the grid positions it covers."""

    rec: Record | None
    index: dict                    # axis name -> fixed value index (group and loop axes)
    vec: list                      # names of the vectorised axes (in grid order)
    rowwise: bool = False
    label: str = ""
    invalid: str | None = None     # why every row of the block is invalid (on_invalid != "error")
    #: categorical axes priced as arrays (``hardware``, ``n_devices``, ``weight_dtype``, ``model``):
    #: axis name -> the value indices the block covers (ascending; contiguous but for ``hardware``),
    #: and the loaded devices
    members: dict = field(default_factory=dict)
    stack: tuple = ()
    counts: tuple = ()             # the device counts of an ``n_devices`` member axis, in its order
    dtypes: tuple = ()             # the weight dtypes of a ``weight_dtype`` member axis, in its order
    models: tuple = ()             # the model ids of a ``model`` member axis, in its order

    def where(self, names: list) -> tuple:
        """The block's region of the grid: fixed indices, member indices (a slice where contiguous),
        whole axes."""
        return tuple(self.index[n] if n in self.index else positions(self.members[n]) if n in self.members
                     else slice(None) for n in names)


def positions(idx: list):
    """Value indices as a slice when contiguous, else the list (see :func:`runs`)."""
    return slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] == len(idx) - 1 else list(idx)


def plan_axes(base: dict, axes: dict, strict: bool = True, in_memory: bool = True) -> list[Axis]:
    """The axes with their values parsed; a numeric value out of its field's range raises, or with
    ``strict`` False is recorded in ``refused`` and stands in as another value of the axis (its rows
    are marked invalid). The grid's size is checked first (:func:`check_grid`)."""
    if not isinstance(axes, dict):
        raise InputError(f"axes must be a mapping of field: values, got {type(axes).__name__}", source=_SOURCE,
                         field="axes")
    parsed = {name: parse_axis(name, spec) for name, spec in axes.items()}
    for name, vals in parsed.items():
        if not vals:
            raise InputError("an axis needs at least one value", source=_SOURCE, field=name)
        if len(vals) > MAX_AXIS_VALUES:
            _check_count(name, f"<{len(vals)} values>", len(vals))
    check_grid({k: len(v) for k, v in parsed.items()}, in_memory)
    out = []
    for name, vals in parsed.items():
        numeric = name in NUMERIC_AXES and not any(_empty(v) for v in vals)
        ax = Axis(name, vals, numeric)
        if numeric:
            if strict:
                ax.values = [convert(name, v, _SOURCE) for v in vals]     # type and range, once per value
            else:
                for i, v in enumerate(vals):
                    try:
                        ax.values.append(convert(name, v, _SOURCE))
                    except InputError as exc:
                        ax.values.append(None)
                        ax.refused[i] = str(exc)
                ok = [v for v in ax.values if v is not None]
                if not ok:
                    raise InputError(f"no valid value: {next(iter(ax.refused.values()))}", source=_SOURCE, field=name)
                ax.values = [ok[0] if v is None else v for v in ax.values]
        else:
            ax.values = [None] * len(vals)
        out.append(ax)
    return out


def group_blocks(base: dict, axes: list[Axis], strict: bool = True) -> list[Block]:
    """Parse one record per group (and per looped value), recording canonical axis values. A group
    whose record is refused (or whose model does not split over its devices) raises, or with
    ``strict`` False becomes an invalid block (its rows marked). The ``hardware`` and
    ``n_devices`` axes are priced as arrays where the engine allows
    (:func:`costmodel.analysis.sweep_stack.stacked_blocks`); a
    refused grid raises the first refused row's error in grid order, as group by group."""
    group = [a for a in axes if not a.numeric]
    hw = next((a for a in group if a.name == "hardware" and len(a.raw) > 1
               and all(isinstance(v, str) for v in a.raw)), None)
    nd = next((a for a in group if a.name == "n_devices" and len(a.raw) > 1), None)
    token = _PARSED.set({})
    try:
        if hw is not None or nd is not None:
            try:
                return _blocks(base, axes, strict, hw, nd)
            except InputError:
                if not strict:
                    raise
        return _blocks(base, axes, strict, None, None)     # raises at the first refused group
    finally:
        _PARSED.reset(token)


def _blocks(base: dict, axes: list[Axis], strict: bool, hw, nd) -> list[Block]:
    from costmodel.analysis.sweep_stack import device_runs, stacked_blocks

    group = [a for a in axes if not a.numeric]
    numeric = [a for a in axes if a.numeric]
    outer = [a for a in group if a is not hw and a is not nd]
    blocks = []
    for oidx in itertools.product(*(range(len(a.raw)) for a in outer)):
        index = dict(zip((a.name for a in outer), oidx))
        left = [None]
        if nd is not None:
            got, left = device_runs(base, axes, index, hw, nd, strict)
            blocks.extend(got)
        for jn in left:
            idx = index if jn is None else {**index, "n_devices": jn}
            got = None if hw is None else stacked_blocks(base, axes, idx, hw, strict)
            if got is not None:
                blocks.extend(got)
                continue
            for j in ([None] if hw is None else range(len(hw.raw))):
                full = idx if j is None else {**idx, "hardware": j}
                blocks.extend(_group_blocks(base, group, numeric, tuple(full[a.name] for a in group), strict))
    for a in group:                 # values only invalid groups had: as given
        a.values = [canonical_value(r) if v is None else v for v, r in zip(a.values, a.raw)]
    from costmodel.analysis.sweep_stack import stack_dtypes
    return stack_dtypes(blocks, axes)


def _group_blocks(base: dict, group: list[Axis], numeric: list[Axis], gidx: tuple, strict: bool) -> list[Block]:
    """The blocks of one group (one value of every non-numeric axis): one, or one per looped value."""
    blocks = []
    gvals = {a.name: a.raw[i] for a, i in zip(group, gidx)}
    first = {a.name: a.values[0] for a in numeric}
    index = dict(zip((a.name for a in group), gidx))
    label = _label(list(gvals.items()))
    try:
        rec = _parse({**base, **gvals, **first}, list(gvals.items()), execs=True)
    except InputError as exc:
        if strict:
            raise
        rec = _any_row(base, gvals, numeric)
        if rec is None:
            return [Block(None, index, [], label=label, invalid=str(exc))]
    if rec.strategy == "tree" and rec.tree_shape == "optimal_for_hardware":
        # a tree searched per configuration: row by row (each row re-parsed)
        blocks.append(Block(rec, index, [], rowwise=True, label=label))
    else:
        loop = [a for a in numeric if a.name in TREE_LOOP] if rec.strategy == "tree" else []
        vec = [a.name for a in numeric if a not in loop]
        for lidx in itertools.product(*(range(len(a.values)) for a in loop)):
            lvals = {a.name: a.values[i] for a, i in zip(loop, lidx)}
            pairs = list(gvals.items()) + list(lvals.items())
            lindex = {**index, **dict(zip((a.name for a in loop), lidx))}
            try:
                r = _parse({**base, **gvals, **first, **lvals}, pairs) if loop else rec
            except InputError as exc:
                if strict:
                    raise
                blocks.append(Block(None, lindex, [], label=_label(pairs), invalid=str(exc)))
                continue
            blocks.append(Block(r, lindex, vec, label=_label(pairs)))
    for a, i in zip(group, gidx):
        if a.values[i] is None:
            a.values[i] = canonical_value(getattr(rec, a.name))
    return blocks


def runs(where: tuple):
    """``where`` (a block's region, at most one component a list of value indices) as regions of
    plain indices and slices: (region, k, (start, stop)) for each contiguous run of that list, k its
    position among the region's non-integer components and start:stop the run's place in the list;
    ``where`` itself when it holds no list ((where, None, None))."""
    lists = [i for i, w in enumerate(where) if isinstance(w, list)]
    if not lists:
        return [(where, None, None)]
    (i,) = lists
    idx = where[i]
    k = sum(1 for w in where[:i] if not isinstance(w, (int, np.integer)))
    out, start = [], 0
    for end in range(1, len(idx) + 1):
        if end == len(idx) or idx[end] != idx[end - 1] + 1:
            out.append((where[:i] + (slice(idx[start], idx[end - 1] + 1),) + where[i + 1:], k, (start, end)))
            start = end
    return out


def canonical_value(v):
    if isinstance(v, tuple):
        return ",".join(_num_text(x) for x in v)
    return v


def _num_text(x) -> str:
    return repr(x) if isinstance(x, float) else str(x)


def arrays_for(block: Block, axes: dict, sl: dict | None = None) -> dict:
    """The vectorised numeric axes as arrays shaped to broadcast: axis k of len(vec) dims (a
    categorical axis priced as an array, ``block.members``, has its dimension but no array here)."""
    vec = block.vec
    out = {}
    for k, name in enumerate(vec):
        if name in block.members:
            continue
        v = np.asarray(axes[name].values, dtype=float)
        if sl and name in sl:
            v = v[sl[name]]
        shape = [1] * len(vec)
        shape[k] = v.shape[0]
        out[name] = v.reshape(shape)
    return out


#: the text an ``invalid_reason`` gives for each numeric rule of costmodel.inputs.rules
RULE_REASONS = {"prefix_exceeds_prompt": "shared_prefix_len > prompt_len",
                "tau_exceeds_chain": "mean_accepted_tokens outside [1, gamma + 1]",
                "chain_taus_disagree": "acceptance_rate and mean_accepted_tokens disagree by more than 5%",
                "context_exceeds_max": "prompt_len + gen_len beyond the model's max_context"}


def check_block(block: Block, arrays: dict, invalid=None, where=None) -> None:
    """The numeric cross-field rules of :mod:`costmodel.inputs.rules` over the grid (each axis value's own
    type and range were checked when the axis was parsed); the first offending row is re-parsed so
    the error is parse_record's own. With ``invalid`` (an
    :class:`~costmodel.analysis.sweep_invalid.InvalidRows`) the offending rows are marked there
    instead, each rule's with its reason (``where``: the block's region of the grid, or a list of
    regions)."""
    rec = block.rec
    if invalid is not None:
        for rule, mask in rules.grid_rule_violations(rec, arrays):
            if np.any(mask):
                for w in (where if isinstance(where, list) else [where]):
                    invalid.mark(w, RULE_REASONS.get(rule.__name__, rule.__name__.replace("_", " ")), mask)
        return
    bad = rules.grid_violations(rec, arrays)
    if bad is None or not np.any(bad):
        return
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    pos = np.unravel_index(int(np.argmax(np.broadcast_to(bad, shape))), shape)
    row = {name: arrays[name].reshape(-1)[pos[k] if arrays[name].shape[k] > 1 else 0]
           for k, name in enumerate(block.vec) if name in arrays}
    row = {k: (int(v) if BY_NAME[k].kind == "int" else float(v)) for k, v in row.items()}
    d = {f: getattr(rec, f) for f in FIELD_NAMES if getattr(rec, f) is not None}
    d.update(row)
    r = parse_record(d, source=block.label + f" row {row}")       # raises with record.py's message
    from costmodel.engine.evaluate import check_context
    try:
        check_context(r, load_model(r.model))                      # or with the engine's own
    except InputError as exc:
        raise InputError(str(exc), source=block.label + f" row {row}") from None
    raise InputError(f"invalid combination of values {row}", source=block.label)   # pragma: no cover
