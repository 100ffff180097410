"""Records: the one flat shape for API calls, scenario entries, measurements and claims.

``parse_record(mapping)`` is the single place input errors about records are raised: unknown fields
(with a 'did you mean'), wrong types, out-of-range values and contradictions all raise InputError
naming the field, the bad value and what is allowed. What each field accepts (type, choices, range,
default, unit) is read from :mod:`costmodel.inputs.fields`; the rules that tie fields together live
in :mod:`costmodel.inputs.rules`. Values may be strings (command line, CSV cells); None or blank text
means "default", while 'nan', 'inf' and a float NaN are refused. The kinds of bad input and their
messages: docs/errors.md.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel.errors import InputError, shown, shown_text, suggest
from costmodel.inputs import rules
from costmodel.inputs.fields import (BY_NAME, DTYPE_CHOICES, KV_DTYPE_CHOICES, FIELD_NAMES, FIELDS, MAX_RANKS,
                                     META_FIELDS, REQUIRED_FIELDS)

_TYPES = {"text": "str", "choice": "str", "int": "int", "float": "float", "floats": "tuple", "ints": "tuple",
          "schedule": "str"}


def _replace(self, **kw) -> "Record":
    """A copy with some fields changed (not re-validated)."""
    return dataclasses.replace(self, **kw)


#: A validated record: one attribute per field of :data:`costmodel.inputs.fields.FIELDS`, with its
#: default (None where the default is resolved later, e.g. tensor_parallel = n_devices / pipeline_parallel).
Record = dataclasses.make_dataclass(
    "Record",
    [(f.name, _TYPES[f.kind]) if f.required else
     (f.name, f"{_TYPES[f.kind]} | None", dataclasses.field(default=f.default)) for f in FIELDS],
    frozen=True, namespace={"replace": _replace, "__doc__": "A validated record (fields: costmodel.inputs.fields)."})
Record.__module__ = __name__

#: integer fields and their least value (for code that converts numbers itself)
INT_FIELDS = {f.name: int(f.minimum) for f in FIELDS if f.kind == "int"}


def _short(v, limit: int = 40) -> str:
    """A bad value as messages show it: command-line text as typed, anything else as its repr
    (cut before it is built: :func:`costmodel.errors.shown`)."""
    if isinstance(v, str):
        head = v[:limit + 8].strip()
        if head and head == head.strip("'\""):
            return shown_text(head if len(v) <= limit + 8 else head + "...", limit)
    return shown(v, limit)


def _as_number(name, v, src, what, allowed=None):
    """bool/str/int/float -> int or float, refusing non-numbers and non-finite values ('nan', 'inf')."""
    if isinstance(v, bool):
        raise InputError(f"must be {what}, got {shown(v)}", source=src, field=name, allowed=allowed)
    if isinstance(v, str):
        s = v.strip().replace("_", "")
        if not s.isascii():     # int() and float() would read Arabic-Indic or full-width digits
            raise InputError(f"must be {what} written with ASCII digits, got {shown(v)}", source=src, field=name,
                             allowed=allowed)
        try:
            v = int(s)
        except ValueError:
            try:
                v = float(s)
            except ValueError:
                raise InputError(f"must be {what}, got {shown(v)}", source=src, field=name, allowed=allowed) from None
    if not isinstance(v, (int, float)):
        kind = {list: "a list", tuple: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)
        raise InputError(f"must be {what}, got {kind} {_short(v)}", source=src, field=name, allowed=allowed)
    try:
        finite = math.isfinite(v)
    except OverflowError:                       # an integer beyond float range
        finite = False
    if not finite:
        raise InputError(f"must be a finite number, got {_short(v)}", source=src, field=name,
                         allowed=allowed or "a finite number (not nan or inf)")
    return v


def _as_int(name, v, src):
    spec = BY_NAME[name]
    if type(v) is int and -(1 << 62) < v < (1 << 62) and not spec.out_of_range(v):
        return v                    # a plain in-range int: what the checks below return, without them
    raw = v
    allowed = spec.allowed
    v = _as_number(name, v, src, "an integer", allowed)
    if isinstance(v, float):
        if v != int(v):
            raise InputError(f"must be an integer, got {_short(raw)}", source=src, field=name, allowed=allowed)
        v = int(v)
    if spec.out_of_range(v):
        raise InputError(f"out of range: {_short(raw)}", source=src, field=name, allowed=allowed)
    return v


def _as_float(name, v, src):
    spec = BY_NAME.get(name)
    if type(v) is float and math.isfinite(v) and not (spec is not None and spec.kind == "float" and spec.out_of_range(v)):
        return v                    # a finite in-range float: what the checks below return, without them
    v = float(_as_number(name, v, src, "a number"))
    if spec is not None and spec.kind == "float" and spec.out_of_range(v):
        raise InputError(f"out of range: {v}", source=src, field=name, allowed=spec.allowed)
    return v


#: (field, text) -> its converted value: a field's conversion depends on the text alone (the
#: source only names where an error is), so text seen before is looked up (a sweep parses the same
#: ids and choices for hundreds of records)
_FROM_TEXT: dict = {}


def convert(name: str, v, src: str = "record"):
    """One field's value from text or a number, checked against its type, choices and range
    (:mod:`costmodel.inputs.fields`); InputError otherwise. ``v`` must not be empty (see ``_empty``)."""
    if type(v) is str:
        hit = _FROM_TEXT.get((name, v))
        if hit is None:
            hit = _convert(name, v, src)
            if len(_FROM_TEXT) >= 4096:
                _FROM_TEXT.clear()
            _FROM_TEXT[(name, v)] = hit
        return hit
    return _convert(name, v, src)


def _convert(name: str, v, src: str):
    kind = BY_NAME[name].kind
    if kind == "int":
        return _as_int(name, v, src)
    if kind == "float":
        return _as_float(name, v, src)
    if kind == "floats":
        return _as_rank_list(name, v, src) if name == "rank_acceptance" else _as_probability_list(name, v, src)
    if kind == "ints":
        return _as_int_list(name, v, src)
    if kind == "schedule":
        from costmodel.inputs.schedule import canonical
        return canonical(v, src)
    return _as_text(name, v, src)


def _list_items(v):
    """The items of a list given as a list, or as a string separated by commas (or semicolons); None
    for anything else."""
    if isinstance(v, str):
        return [p for p in v.replace(";", ",").split(",") if p.strip()]
    if isinstance(v, (list, tuple)):
        return list(v)
    return None


def _as_float_list(name, v, src):
    parts = _list_items(v)
    if parts is None:
        parts = [v]
    return tuple(_as_float(name, p, src) for p in parts)


def _as_int_list(name, v, src):
    parts = _list_items(v)
    if parts is None:
        raise InputError(f"must be a list of parent indices, got {_short(v)}", source=src, field=name,
                         allowed=BY_NAME[name].allowed)
    out = []
    for p in parts:
        try:
            f = _as_number(name, p, src, "a list of integer parent indices")
        except InputError:
            raise InputError(f"parent indices must be integers, got {_short(p)}", source=src, field=name,
                             allowed=BY_NAME[name].allowed) from None
        if f != int(f):
            raise InputError(f"parent indices must be integers, got {_short(p)}", source=src, field=name)
        out.append(int(f))
    return tuple(out)


def _empty(v) -> bool:
    """None or blank text means 'default'. A float NaN does not: it is refused like 'nan' (a pandas
    row must turn its NaN cells into None first)."""
    return v is None or (isinstance(v, str) and v.strip() == "")


def _as_rank_list(name, v, src):
    p = _as_float_list(name, v, src)
    if not p or len(p) > MAX_RANKS or any(x < 0 or x > 1 for x in p) or sum(p) > 1.0 + 1e-9:
        raise InputError(f"invalid rank acceptance {_short(list(p), 80)}", source=src, field=name,
                         allowed=BY_NAME[name].allowed)
    return p


def _as_probability_list(name, v, src):
    """1 to MAX_RANKS probabilities, each in [0, 1] (``acceptance_by_position``: not exclusive, no Σ bound)."""
    p = _as_float_list(name, v, src)
    if not p or len(p) > MAX_RANKS or any(x < 0 or x > 1 for x in p):
        raise InputError(f"invalid probabilities {_short(list(p), 80)}", source=src, field=name,
                         allowed=BY_NAME[name].allowed)
    return p


def _as_text(name, v, src):
    """Text and choice fields: choices are case-insensitive with '-' read as '_' (dtypes: case only)
    and their aliases (strategy=ar); a text field's keywords (draft_model=None) are lower-cased."""
    spec = BY_NAME[name]
    if not isinstance(v, (str, int, float)) or isinstance(v, bool):
        kind = {list: "a list", tuple: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)
        raise InputError(f"must be text, got {kind} {_short(v)}", source=src, field=name)
    s = str(v).strip()
    if spec.keywords and s.lower() in spec.keywords:
        s = s.lower()
    if spec.kind == "choice":
        s = s.lower() if spec.choices in (DTYPE_CHOICES, KV_DTYPE_CHOICES) else s.lower().replace("-", "_")
        s = dict(spec.aliases).get(s, s)
        if s not in spec.choices:
            raise InputError(f"unknown value {shown(v)}{suggest(s, spec.choices)}", source=src, field=name,
                             allowed=spec.allowed)
    return s


def parse_record(data, source: str = "record", allow_meta: bool = False) -> Record:
    """Validate a mapping into a :class:`Record`; InputError on anything wrong (see module doc)."""
    if isinstance(data, Record):
        return data
    if not isinstance(data, dict):
        raise InputError(f"a record must be a mapping of field: value, got {type(data).__name__}", source=source)
    kw, seen = {}, set()
    for raw_key, v in data.items():
        key = str(raw_key).strip()
        if key in seen:
            raise InputError("given twice", source=source, field=key, allowed="each field once")
        seen.add(key)
        if key in META_FIELDS or key.startswith("target_"):
            if allow_meta:
                continue
            raise InputError("not a configuration field here", source=source, field=key,
                             allowed="the record fields (costmodel eval --help lists them)")
        if key not in BY_NAME:
            raise InputError(f"unknown field{suggest(key, FIELD_NAMES)}", source=source, field=key,
                             allowed=", ".join(FIELD_NAMES))
        if _empty(v):
            continue
        kw[key] = convert(key, v, source)
    for req in REQUIRED_FIELDS:
        if req not in kw:
            raise InputError("missing required field", source=source, field=req,
                             allowed=", ".join(REQUIRED_FIELDS[:-1]) + f" and {REQUIRED_FIELDS[-1]} are required")
    rec = Record(**kw)
    rules.check(rec, source)
    return rec


def with_fields(rec: Record, **changes) -> Record:
    """``dataclasses.replace(rec, **changes)`` (not re-validated) without the dataclass's __init__ over
    every field: a record has no __post_init__, so the copy of its fields with some replaced is the
    same record (a sweep builds one per piece and per stacked dtype)."""
    unknown = changes.keys() - rec.__dict__.keys()
    if unknown:
        raise TypeError(f"unknown record field(s) {', '.join(sorted(unknown))}")
    new = object.__new__(Record)
    new.__dict__.update(rec.__dict__)
    new.__dict__.update(changes)
    return new


def parse_changed(rec: Record, name: str, value, source: str = "record") -> Record:
    """``parse_record`` of the mapping that parsed into ``rec`` with field ``name`` set to ``value``
    (not empty): every other field's conversion is pure and passed before, so only ``value`` is
    converted and the rules that tie fields together are checked again; the same record, or the same
    InputError, as parsing the whole mapping."""
    v = convert(name, value, source)
    new = object.__new__(Record)            # rec's fields with one replaced (what Record(**kw) holds)
    new.__dict__.update(rec.__dict__)
    object.__setattr__(new, name, v)
    rules.check(new, source)
    return new
