"""Passes priced once within a sweep (:func:`shared_passes`), for blocks that differ only in what a
pass does not read.

A sweep's autoregressive and speculative blocks of one model on the same devices, dtypes and device
counts each price the target's prompt processing (``prefill_cost``) and its autoregressive decoding
pass (``ar_decode_pass``: the autoregressive step, and the speculative block's ``speedup_vs_ar``
baseline) on equal Execs and equal arrays. Within :func:`shared_passes` a function wrapped by
:func:`shared` runs once per key and later callers get the same Cost object, so the same numbers bit
for bit (Cost arrays are never written in place once a pass has returned them:
``costmodel.fast.arrays._binary``).

The key is everything such a pass reads: the function, every field of the Exec, the batch, prompt
and generated-length arrays, and whether operator rows are kept (``roofline.RECORD_OPS``). A value is
compared as itself when hashable (with its type: 1 and 1.0 are different keys), an array by its
dtype, shape and bytes, and anything else by identity (held by the key, so its id is not reused).
A ``HardwareStack`` or ``WeightDtypes`` hashes by identity: the sweep builds one object per set of
members. At most ``SHARED_PASSES`` entries are kept, the most recently used (enough for neighbouring
blocks), each a pass of at most ``SHARED_MAX_ELEMENTS`` configurations: a bound on the memory held."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections import OrderedDict

import numpy as np

#: most values kept within one :func:`shared_passes` block (least recently used dropped first)
SHARED_PASSES = 16
#: passes of more configurations than this are not kept: a large grid's pieces (65,536 rows by
#: default) hold ~10 such arrays per pass, and each piece has arrays of its own (nothing to share)
SHARED_MAX_ELEMENTS = 1 << 14
_MEMO: contextvars.ContextVar = contextvars.ContextVar("costmodel_shared_passes", default=None)
#: most Execs kept within one :func:`shared_passes` block (least recently used dropped first)
SHARED_EXECS = 32
_EXECS: contextvars.ContextVar = contextvars.ContextVar("costmodel_shared_execs", default=None)


@contextlib.contextmanager
def shared_passes():
    """Within the block, functions wrapped by :func:`shared` price each key once (module docstring).
    Outside it they run every time."""
    token, token_execs = _MEMO.set(OrderedDict()), _EXECS.set(OrderedDict())
    try:
        yield
    finally:
        _EXECS.reset(token_execs)
        _MEMO.reset(token)


class _Same:
    """An unhashable object in a key: equal only to itself, and kept alive by the key."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is _Same and other.obj is self.obj


def value_key(v):
    """``v`` as part of a key: an array (or numpy scalar) by dtype, shape and bytes; a hashable value
    with its type; anything else by identity."""
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        return ("array", a.dtype.str, a.shape, a.tobytes())
    try:
        hash(v)
    except TypeError:
        return _Same(v)
    return (type(v), v)


def exec_key(ex) -> tuple:
    """Every field of an Exec (a dataclass) as a key."""
    return (type(ex),) + tuple(value_key(getattr(ex, f.name)) for f in dataclasses.fields(ex))


def shared_call(name: str, key, compute, keep=None):
    """``compute()``, once per (``name``, ``key``) within :func:`shared_passes` (the same object to
    every caller), every time outside it. ``key`` must hold everything ``compute`` reads. ``keep``:
    whether a result is kept (default: always)."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    return _lru(memo, (name, key), compute, SHARED_PASSES, keep)


def _lru(memo, key, make, limit: int, keep=None):
    """The entry of ``memo`` (an OrderedDict) under ``key``, made by ``make()`` and kept (when
    ``keep`` allows) if absent; the least recently used entry goes beyond ``limit`` entries."""
    hit = memo.get(key)
    if hit is None:
        hit = make()
        if keep is None or keep(hit):
            memo[key] = hit
            if len(memo) > limit:
                memo.popitem(last=False)
    else:
        memo.move_to_end(key)
    return hit


def shared_exec(ex):
    """``ex`` (an Exec, or None), or within :func:`shared_passes` the first Exec equal to it in every
    field (:func:`exec_key`): blocks of one sweep over the same model, stacked devices, dtypes and
    device counts (an autoregressive block and a speculative one, speculative blocks' drafts) then
    hold the same Exec object, whose derived figures (``functools.cached_property``) are computed
    once. Kept apart from the passes (their own SHARED_EXECS entries)."""
    memo = _EXECS.get()
    if memo is None or ex is None:
        return ex
    return _lru(memo, exec_key(ex), lambda: ex, SHARED_EXECS)


def shared(key):
    """Decorator: ``fn(*args, **kw)`` priced once per ``key(*args, **kw)`` (a tuple of
    :func:`value_key`/:func:`exec_key` parts: everything the pass reads, and whether operator rows
    are kept, ``roofline.RECORD_OPS``) within :func:`shared_passes`."""
    def wrap(fn):
        name = f"{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def wrapper(*args, **kw):
            if _MEMO.get() is None:
                return fn(*args, **kw)
            return shared_call(name, key(*args, **kw), lambda: fn(*args, **kw), _small)
        return wrapper
    return wrap


def _small(cost) -> bool:
    """A pass small enough to keep: at most SHARED_MAX_ELEMENTS configurations."""
    return np.size(cost.time_s) <= SHARED_MAX_ELEMENTS
