"""The roofline's pieces by hand: each term, the GEMM overlap and its attribution, the vector
rate, Cost arithmetic (sums, repetitions, deferred work totals). Unit device (tests/data/unit-hw.yaml):
matrix 1e14 FLOP/s (fp16), vector 1e13 FLOP/s, HBM 1e12 B/s, L2 1e13 B/s, efficiency 1."""

import os

import numpy as np
import pytest

from costmodel.engine import roofline
from costmodel.engine.evaluate import build_exec
from costmodel.engine.ops import Op, PassShape
from costmodel.engine.roofline import Cost, DeferredWork
from costmodel.inputs.record import parse_record

D = os.path.join(os.path.dirname(__file__), "data")
BASE = dict(model=f"{D}/unit-model.yaml", hardware=f"{D}/unit-hw.yaml", runtime=f"{D}/unit-rt.yaml")


@pytest.fixture(scope="module")
def ex():
    return build_exec(parse_record(dict(BASE, batch_size=1, prompt_len=1)))


def test_gemm_overlap_raises_the_binding_term_and_keeps_the_attribution():
    # c = 4, m = 3: √(16 + 9) = 5 replaces the compute term; the memory term stays 3
    assert roofline.gemm_overlap(4.0, 3.0) == (5.0, 3.0)
    assert roofline.gemm_overlap(3.0, 4.0) == (3.0, 5.0)
    # a tie goes to compute: √(9 + 9)
    assert roofline.gemm_overlap(3.0, 3.0) == (np.sqrt(18.0), 3.0)
    c, m = roofline.gemm_overlap(np.array([4.0, 3.0, 3.0]), np.array([3.0, 4.0, 3.0]))
    assert list(c) == [5.0, 3.0, np.sqrt(18.0)] and list(m) == [3.0, 5.0, 3.0]


def test_compute_term_adds_the_dequantisation_on_the_vector_rate():
    # 8 FLOPs at 2 FLOP/s + 1 dequantisation FLOP at 0.5 FLOP/s = 4 + 2
    assert roofline.compute_term_s(8.0, 1.0, 2.0, 0.5) == 6.0
    assert roofline.compute_term_s(8.0, 0.0, 2.0, 0.5) == 4.0


def test_l2_term_adds_hbm_bytes_and_l2_re_reads():
    # (3 B from HBM + 1 B re-read from L2) / 2 B/s
    assert roofline.l2_term_s(3.0, 1.0, 2.0) == 2.0


def test_vector_operators_run_on_the_vector_rate(ex):
    vec = Op("norm", "vector", 1.0, flops=2e13, hbm_bytes=1e6)
    mat = Op("gemm", "matrix", 1.0, flops=2e13, hbm_bytes=1e6)
    assert roofline.unit_flops_per_s(vec, ex) == 1e13 and roofline.unit_flops_per_s(mat, ex) == 1e14
    # 2e13 FLOPs: 2 s on the vector units; 1e6 B: 1e-6 s from HBM, (1e6 + 4e6) / 1e13 = 5e-7 s via L2
    vec.l2_bytes = 4e6
    c, m, l2, comm = roofline.op_terms(vec, ex)
    assert (float(c), float(m), float(l2), float(comm)) == (2.0, 1e-6, 5e-7, 0.0)
    assert roofline.op_terms(vec, ex, with_l2=False)[2] is None
    t, idx = roofline.op_time(vec, ex)
    assert float(t) == 2.0 and int(idx) == 0


def test_reference_pass_cost_sums_the_operators_it_is_given(ex):
    # two given operators (not the model's layers): 3 × (1e6 B / 1e12) memory-bound + 2e13 FLOPs / 1e13
    ops = [Op("a", "vector", 3.0, flops=0.0, hbm_bytes=1e6), Op("b", "vector", 1.0, flops=2e13, hbm_bytes=0.0)]
    shape = PassShape(tokens=1.0, pairs=1.0, kv_hbm_tokens=0.0)
    c = roofline.reference_pass_cost(shape, ex, ops=ops)
    kernels = roofline.kernel_count(shape, ex)
    assert [r[0] for r in c.ops] == ["a", "b"]
    assert float(c.by_bound["memory"]) == 3e-6 and float(c.by_bound["compute"]) == 2.0
    assert float(c.flops) == 2e13 and float(c.hbm_bytes) == 3e6
    assert float(c.time_s) == 2.0 + 3e-6 + kernels * 0.0      # unit device: no launch gap
    assert c.bound_index().dtype == np.int8 and int(c.bound_index()) == 0


def _cost(t, f, h):
    by = {b: np.float64(0.0) for b in roofline.BOUNDS}
    by["memory"] = np.float64(t)
    return Cost(np.float64(t), np.float64(f), np.float64(h), by, [("op", f, h, t, "memory")])


def _deferred(t, f, h, by_bound_later=False):
    by = {b: np.float64(0.0) for b in roofline.BOUNDS}
    by["memory"] = np.float64(t)
    return DeferredWork(np.float64(t), (lambda: by) if by_bound_later else by,
                        [("op", f, h, t, "memory")], lambda: (np.float64(f), np.float64(h)))


@pytest.mark.parametrize("make", [_cost, _deferred])
def test_scale_repeats_time_work_and_rows(make):
    # 3 repetitions of (1 s, 2 FLOPs, 5 B)
    c = make(1.0, 2.0, 5.0).scale(3)
    assert (float(c.time_s), float(c.flops), float(c.hbm_bytes)) == (3.0, 6.0, 15.0)
    assert float(c.by_bound["memory"]) == 3.0
    (name, f, h, t, b), = c.ops
    assert (float(f), float(h), float(t), b) == (6.0, 15.0, 3.0, "memory")


@pytest.mark.parametrize("left, right", [(_cost, _deferred), (_deferred, _cost), (_deferred, _deferred)])
def test_sum_with_deferred_work_keeps_rows_and_totals(left, right):
    # (1 s, 2 FLOPs, 5 B) + (4 s, 8 FLOPs, 16 B)
    s = left(1.0, 2.0, 5.0) + right(4.0, 8.0, 16.0)
    assert len(s.ops) == 2 and float(s.ops[1][3]) == 4.0
    assert (float(s.time_s), float(s.hbm_bytes), float(s.flops)) == (5.0, 21.0, 10.0)
    assert float(s.by_bound["memory"]) == 5.0


def test_deferred_work_answers_each_name_with_its_own_value():
    d = _deferred(1.0, 2.0, 5.0, by_bound_later=True)
    assert float(d.hbm_bytes) == 5.0            # read first: work totals computed once
    assert float(d.flops) == 2.0
    assert float(d.by_bound["memory"]) == 1.0
    d2 = _deferred(1.0, 2.0, 5.0, by_bound_later=True)
    assert float(d2.flops) == 2.0               # flops asked while by_bound is still deferred
    with pytest.raises(AttributeError, match="no_such_field"):
        d2.no_such_field
    assert not hasattr(_deferred(1.0, 2.0, 5.0), "no_such_field")


def test_overhead_cost_of_an_array_of_seconds():
    c = roofline.overhead_cost(np.array([1.0, 2.0]))
    assert list(c.time_s) == [1.0, 2.0] and list(c.by_bound["launch"]) == [1.0, 2.0]
    c = roofline.overhead_cost(0.5, shape=(2,))
    assert list(c.time_s) == [0.5, 0.5]


def test_bound_index_is_computed_once_per_cost():
    # memory 2 s, compute 1 s in the first element, the other way round in the second: bound 1 then 0
    z = np.zeros(2)
    by = {b: z for b in roofline.BOUNDS}
    by = dict(by, memory=np.array([2.0, 1.0]), compute=np.array([1.0, 2.0]))
    c = Cost(np.array([2.0, 2.0]), z, z, by, [])
    first = c.bound_index()
    assert first.tolist() == [1, 0] and c.bound_index() is first       # kept: a shared prefill asks twice
    assert not first.flags.writeable
    c.by_bound = dict(by, launch=np.array([3.0, 3.0]))                 # another attribution: computed again
    assert c.bound_index().tolist() == [4, 4]
