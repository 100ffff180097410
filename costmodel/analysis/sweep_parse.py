"""Parsing a sweep's group records for its plan: the labels that name a group in messages, and
:func:`_parse` (``parse_record``, and the model's and draft's execution), each distinct record parsed
once per plan; a record that differs from one parsed before in one field parses that field alone
(:func:`parse_one_changed`). Used by :mod:`costmodel.analysis.sweep_grid` and
:mod:`costmodel.analysis.sweep_stack`."""

from __future__ import annotations

import contextvars
import itertools

from costmodel.analysis.sweep_output import _SOURCE
from costmodel.errors import InputError, again, kept
from costmodel.engine.evaluate import _execs, execs_refusal
from costmodel.inputs.record import Record, parse_changed, parse_record

#: labels already written (text and int values only), at most _MAX_LABELS: a plan asks for a group's
#: label once per block and per refused device
_LABELS: dict = {}
_MAX_LABELS = 4096
_LABEL_TYPES = {str, int}


def _label(pairs) -> str:
    pairs = tuple(pairs)
    if {type(v) for _k, v in pairs} <= _LABEL_TYPES:      # kept: text and ints label alike
        hit = _LABELS.get(pairs)
        if hit is None:
            if len(_LABELS) >= _MAX_LABELS:
                _LABELS.clear()
            hit = _LABELS[pairs] = _label_now(pairs)
        return hit
    return _label_now(pairs)


def _label_now(pairs) -> str:
    return f"{_SOURCE} ({', '.join(f'{k}={_show(v)}' for k, v in pairs)})" if pairs else _SOURCE


def _show(v):
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return v



def _any_row(base: dict, gvals: dict, numeric: list):
    """The record of a row of the group after its first (the first may be the invalid one: any row
    that parses will do; the numeric axes are arrays whose invalid rows check_block marks), or None.
    None at once when the first row parses but its model does not run on its devices: that does
    not depend on the numeric fields."""
    try:
        _parse({**base, **gvals, **{a.name: a.values[0] for a in numeric}}, list(gvals.items()))
        return None
    except InputError:
        pass
    rows = itertools.islice(itertools.product(*(a.values for a in numeric)), 1, 256)
    return next(filter(None, (_parse_or_none({**base, **gvals, **dict(zip((a.name for a in numeric), r))},
                                             list(gvals.items())) for r in rows)), None)


def _parse_or_none(d: dict, pairs):
    try:
        return _parse(d, pairs, execs=True)
    except InputError:
        return None


#: one plan's parsed records and refusals (:func:`group_blocks`): the plan asks for the same record
#: several times (a device count's run, then its block; a refused group's device count, then its
#: devices); parse_record is pure, so the answer is looked up, the refusal re-raised as a copy
_PARSED: contextvars.ContextVar = contextvars.ContextVar("sweep_parsed", default=None)


def _parse(d: dict, pairs, execs: bool = False) -> Record:
    """parse_record; with ``execs`` also build the model's and draft's execution (a model that does
    not split over the devices is refused here, before anything is evaluated). Within one plan
    each distinct (mapping, label, ``execs``) is parsed once."""
    return _memo(d, pairs, execs, lambda: _parse_now(d, pairs, execs))


def _memo(d: dict, pairs, execs: bool, compute) -> Record:
    """``compute()``, looked up in the plan's records by (mapping, label, ``execs``) and kept there,
    a refusal too (re-raised as a copy); computed every time outside a plan or for an unhashable
    value (a list)."""
    memo = _PARSED.get()
    try:
        key = (tuple(d.items()), tuple(pairs), execs)
        hit = None if memo is None else memo.get(key)
    except TypeError:
        memo = hit = None
    if hit is None:
        try:
            hit = compute()
        except InputError as exc:
            if memo is None:
                raise
            hit = kept(exc)
        if memo is not None:
            memo[key] = hit
    if isinstance(hit, InputError):
        raise again(hit)
    return hit


def _parse_now(d: dict, pairs, execs: bool) -> Record:
    memo = _PARSED.get()
    last = None if memo is None else memo.get(_LAST)
    name = None if last is None else _one_changed(last[0], d)
    if name is not None and name not in last[1].__dict__:
        name = None                      # not a field's own name (parse_record strips and checks keys)
    try:
        if name is not None:             # the last mapping that parsed, one field changed: that field parsed
            rec = parse_changed(last[1], name, d[name], _label(pairs))
        else:
            rec = parse_record(d, source=_label(pairs))
    except InputError:
        raise
    except (TypeError, ValueError) as exc:      # pragma: no cover - parse_record raises InputError
        raise InputError(str(exc), source=_label(pairs)) from None
    if memo is not None:
        memo[_LAST] = (dict(d), rec)
    return _with_execs(rec, pairs) if execs else rec


#: the plan's lookup keeps the last mapping that parsed, and its record, under this key
_LAST = object()


def _one_changed(before: dict, d: dict):
    """The one field whose value differs between two mappings with the same fields in the same order
    (values compared with their types: 1 and 1.0 differ), when it is not empty; else None."""
    if len(before) != len(d):
        return None
    changed = None
    for (k0, v0), (k, v) in zip(before.items(), d.items()):
        if k0 != k:
            return None
        try:
            if v0 is v or (type(v0) is type(v) and bool(v0 == v)):
                continue
        except (TypeError, ValueError):  # values that do not compare as one truth value (arrays)
            return None
        if changed is not None:
            return None
        changed = k
    if changed is None or d[changed] is None or isinstance(d[changed], str) and not d[changed].strip():
        return None
    return changed


def parse_one_changed(rec: Record, name: str, d: dict, pairs, execs: bool = False) -> Record:
    """``_parse(d, pairs, execs)`` where ``d`` is the mapping that parsed into ``rec`` with field
    ``name`` changed (:func:`costmodel.inputs.record.parse_changed`: the same record or error, one
    field parsed), kept in the plan's lookup like any parse."""
    v = d[name]
    if isinstance(v, str) and not v.strip() or v is None:
        return _parse(d, pairs, execs)
    def compute():
        got = parse_changed(rec, name, v, _label(pairs))
        return _with_execs(got, pairs) if execs else got
    return _memo(d, pairs, execs, compute)


def refusal_one_changed(rec: Record, name: str, d: dict, pairs, label: str | None = None) -> str | None:
    """The message of :func:`parse_one_changed` with ``execs`` (the record's refusal), or None when it
    parses. For a record asked about once (a refused group's device), so it is not kept in the plan's
    lookup: the same text without the lookup's key and copies. ``label``: ``_label(pairs)`` when the
    caller has it."""
    v = d[name]
    if not isinstance(v, str) or not v.strip():
        try:
            _parse(d, pairs, True)
            return None
        except InputError as exc:
            return str(exc)
    label = _label(pairs) if label is None else label
    try:
        got = parse_changed(rec, name, v, label)
    except InputError as exc:
        return str(exc)
    refused = execs_refusal(got)             # _with_execs' message, without raising it
    return None if refused is None else str(InputError(str(refused), source=label))


def _with_execs(rec: Record, pairs) -> Record:
    """``rec`` once the model's and draft's execution build (InputError naming the group otherwise)."""
    try:
        _execs(rec)
    except InputError as exc:
        raise InputError(str(exc), source=_label(pairs)) from None
    return rec
