"""The sweep's record of invalid rows (costmodel.analysis.sweep_invalid.InvalidRows): the first reason
given for a row is kept, the boolean mask is kept as rows are marked, and refused groups marked
together (mark_indexed) leave exactly what marking them one by one leaves."""

import numpy as np

from costmodel.analysis.sweep_invalid import InvalidRows

SHAPE = (4, 3, 2, 5)
ALL = slice(None)


def _one_by_one(first, regions):
    rows = InvalidRows(SHAPE)
    for where, why in first + regions:
        rows.mark(where, why)
    return rows


NAMES = ["a", "b", "c", "d"]


def _together(first, regions):
    """The regions as a sweep's refused groups give them: an index of the fixed axes by name."""
    rows = InvalidRows(SHAPE)
    for where, why in first:
        rows.mark(where, why)
    rows.mark_indexed(NAMES, [({n: x for n, x in zip(NAMES, w) if not isinstance(x, slice)}, why)
                              for w, why in regions])
    return rows


def _same(a, b):
    return a.reasons.tolist() == b.reasons.tolist() and np.array_equal(a.mask, b.mask) and a.mask.dtype == bool


def test_first_reason_kept_and_mask_by_hand():
    rows = InvalidRows(SHAPE)
    assert rows.mask is None and rows.count() == 0
    rows.mark((0, 1, ALL, ALL), "a")                 # 2 x 5 = 10 rows
    rows.mark((0, ALL, 0, ALL), "b", mask=np.arange(5) < 2)     # rows (0, *, 0, 0..1): 2 of them were "a"
    assert rows.count() == 10 + 4
    assert rows.reasons[0, 1, 0, 0] == "a" and rows.reasons[0, 0, 0, 1] == "b" and rows.reasons[0, 2, 0, 2] is None


def test_refused_groups_marked_together_equal_one_by_one():
    """Groups fixed on the first three axes, the last taken whole: 6 groups of 5 rows, each its own
    reason (as a sweep labels each device's refusal)."""
    regions = [((i, j, k, ALL), f"group {i} {j} {k}") for i in (0, 3) for j in (0, 2) for k in (0, 1)][:6]
    together = _together([], regions)
    assert _same(together, _one_by_one([], regions))
    assert together.count() == 6 * 5
    assert together.reasons[3, 0, 1, 4] == "group 3 0 1"


def test_marked_together_after_earlier_marks_keeps_the_first_reason():
    """A row marked before (a refused axis value) keeps its reason: the regions are then marked one by
    one, as before."""
    first = [((ALL, ALL, ALL, 2), "refused value")]
    regions = [((0, j, 1, ALL), f"group {j}") for j in range(3)]
    together = _together(first, regions)
    assert _same(together, _one_by_one(first, regions))
    assert together.reasons[0, 1, 1, 2] == "refused value" and together.reasons[0, 1, 1, 3] == "group 1"


def test_groups_fixing_other_axes_are_marked_one_by_one():
    """Groups that do not fix the same axes give what marking them one by one gives; no group, no
    invalid rows."""
    regions = [((0, 2, 1, ALL), "three axes"), ((1, ALL, 0, 3), "other axes"), ((2, ALL, ALL, ALL), "one axis")]
    assert _same(_together([], regions), _one_by_one([], regions))
    assert _together([], []).mask is None
