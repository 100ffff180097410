"""Bit-for-bit comparisons shared by the pass-evaluator tests (tests/test_pass_shortcuts.py,
tests/test_pass_batch.py): a fast path's answer against the reference max/argmax of an operator's
four roofline terms, and a whole pass against the reference pass."""

import numpy as np

from costmodel.engine.evaluate import build_exec
from costmodel.engine.roofline import op_terms
from costmodel.inputs.record import parse_record


def exec_for(**kw):
    """The Exec of a record (llama-68m on an A100 unless ``kw`` says otherwise)."""
    return build_exec(parse_record(dict(dict(model="llama-68m", hardware="a100-80gb"), batch_size=1, prompt_len=1,
                                        **kw)))


def ref_op_time(op, ex):
    """(time, bound index): the stacked max and first argmax of the operator's four terms."""
    stack = np.stack(np.broadcast_arrays(*op_terms(op, ex)))
    return stack.max(axis=0), stack.argmax(axis=0)


def bits_equal(a, b):
    """Same shape and the same IEEE bits in every element (so -0.0 differs from +0.0, NaNs compare)."""
    a, b = np.ascontiguousarray(a, dtype=float), np.ascontiguousarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def assert_pass_equals_reference(got, want):
    """A pass's time, work and every bound's share equal the reference pass's, bit for bit."""
    for f in ("time_s", "flops", "hbm_bytes"):
        assert bits_equal(getattr(got, f), getattr(want, f)), f
    for b in want.by_bound:
        assert bits_equal(np.broadcast_to(got.by_bound[b], np.shape(want.time_s)),
                          np.broadcast_to(want.by_bound[b], np.shape(want.time_s))), b


def assert_answers_match_reference(ops, ex, answer) -> set:
    """``answer(op, ex)`` answers every operator (not None) with the reference time bit for bit and
    the reference bound index (broadcast); returns the bound indices that occurred."""
    bounds = set()
    for op in ops:
        got = answer(op, ex)
        assert got is not None, op.name
        want_t, want_i = ref_op_time(op, ex)
        assert bits_equal(got[0], want_t), op.name
        assert np.array_equal(np.broadcast_to(got[1], want_i.shape), want_i), op.name
        bounds |= set(np.unique(want_i).tolist())
    return bounds
