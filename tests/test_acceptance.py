import numpy as np
import pytest
from hypothesis import given, strategies as st

from costmodel.engine import acceptance
from costmodel.engine.tree import Tree, full_tree, optimal_tree


def test_leviathan_by_hand():
    # α = 0.8, γ = 4: 1 + .8 + .64 + .512 + .4096 = 3.3616
    assert acceptance.chain_tokens_per_step(0.8, 4) == pytest.approx(3.3616)


def test_lockstep_by_hand():
    # B = 8: r = 0.8^8 = 0.16777216; 1 + r + r² + r³ + r⁴
    r = 0.8 ** 8
    assert acceptance.lockstep_tokens_per_step(0.8, 4, 8) == pytest.approx(1 + r + r**2 + r**3 + r**4)
    assert acceptance.lockstep_tokens_per_step(0.8, 4, 8) == pytest.approx(1.2014, abs=1e-4)


def test_alpha_from_tau_inverts():
    assert acceptance.alpha_from_tau(3.3616, 4) == pytest.approx(0.8, abs=1e-9)


def test_full_binary_tree_by_hand():
    # depth 1: 0.6 + 0.2; depth 2: (0.6 + 0.2)² = 0.64 → 1 + 0.8 + 0.64 = 2.44
    assert full_tree(2, 2).expected_tokens((0.6, 0.2)) == pytest.approx(2.44)
    assert full_tree(2, 2).n_nodes == 6


def test_tree_geometry():
    t = full_tree(2, 2)
    assert list(t.depths) == [1, 1, 2, 2, 2, 2]
    assert list(t.level_sizes) == [2, 4]
    assert list(t.leaf_path_lengths) == [3, 3, 3, 3]
    # 7 tokens (root + 6) each attend to themselves plus ancestors: 1 + 2·2 + 4·3 = 17
    assert t.ancestor_pairs == 17


def test_default_rank_model_reduces_to_chain():
    p = acceptance.default_rank_acceptance(0.7)
    assert p[0] == pytest.approx(0.7) and p[1] == pytest.approx(0.21)
    chain = Tree((0, 1, 2, 3))
    assert chain.expected_tokens(p) == pytest.approx(float(acceptance.chain_tokens_per_step(0.7, 4)))


@given(st.floats(0.0, 0.99), st.integers(1, 12))
def test_optimal_width1_tree_is_leviathans_chain(alpha, n):
    t = optimal_tree(n, (alpha,))
    assert t.expected_tokens((alpha,)) == pytest.approx(float(acceptance.chain_tokens_per_step(alpha, n)))


@given(st.floats(0.05, 0.95), st.integers(2, 30))
def test_optimal_tree_beats_chain_and_is_monotone_in_budget(alpha, n):
    p = acceptance.default_rank_acceptance(alpha, 4)
    t_n = optimal_tree(n, p).expected_tokens(p)
    assert t_n >= Tree(tuple(range(n))).expected_tokens(p) - 1e-9
    assert t_n >= optimal_tree(n - 1, p).expected_tokens(p) - 1e-9
    assert optimal_tree(n, p).n_nodes == n


@given(st.floats(0.0, 0.99), st.floats(0.0, 0.99), st.integers(1, 16))
def test_chain_tokens_bounds_and_monotone(a1, a2, gamma):
    lo, hi = sorted((a1, a2))
    t_lo = acceptance.chain_tokens_per_step(lo, gamma)
    t_hi = acceptance.chain_tokens_per_step(hi, gamma)
    assert 1.0 <= t_lo <= t_hi + 1e-12 <= gamma + 1 + 1e-9


@given(st.floats(0.0, 0.99), st.integers(1, 8), st.integers(1, 64))
def test_lockstep_never_beats_ragged(alpha, gamma, batch):
    assert acceptance.lockstep_tokens_per_step(alpha, gamma, batch) <= acceptance.chain_tokens_per_step(alpha, gamma) + 1e-12


def test_alpha_one_accepts_every_draft_without_a_warning():
    # α = 1: every draft accepted, τ = γ + 1 (the closed form is 0/0 there); the batch keeps all too
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(acceptance.chain_tokens_per_step(1.0, 4)) == 5.0
        assert float(acceptance.lockstep_tokens_per_step(1.0, 3, 8)) == 4.0
        assert list(acceptance.chain_tokens_per_step(np.array([1.0, 0.5]), 2)) == [3.0, 1.75]  # 1 + .5 + .25


def test_default_rank_model_has_eight_ranks_by_hand():
    # p_i = α(1 − α)^(i−1): α = 0.5 → 0.5, 0.25, …, 0.5^8 (eight ranks unless k says otherwise)
    assert acceptance.default_rank_acceptance(0.5) == tuple(0.5 ** i for i in range(1, 9))
    assert acceptance.default_rank_acceptance(0.5, 3) == (0.5, 0.25, 0.125)


def test_acceptance_by_position_over_an_array_of_gammas():
    # α by position (0.8, 0.5, 0.5): survival 1, .8, .4, .2
    alphas = (0.8, 0.5, 0.5)
    np.testing.assert_allclose(acceptance.position_survival(alphas, np.array([1, 3])),
                               [[1.0, 1.0], [0.8, 0.8], [0.0, 0.4], [0.0, 0.2]])
    # γ = 1: 1 + .8; γ = 2: 1 + .8 + .4; γ = 3: + .2
    got = acceptance.chain_tokens_by_position(alphas, np.array([1, 2, 3]))
    assert got.shape == (3,)
    np.testing.assert_allclose(got, [1.8, 2.2, 2.4])


def test_lockstep_by_position_broadcasts_gamma_and_batch():
    alphas = (0.8, 0.5, 0.5)                    # survival 1, .8, .4, .2
    one = acceptance.lockstep_tokens_by_position(alphas, 2, 2)
    assert np.ndim(one) == 0 and float(one) == pytest.approx(1 + 0.64 + 0.16)
    # same shapes, element by element: (γ 1, B 1) = 1 + .8; (γ 3, B 2) = 1 + .64 + .16 + .04
    got = acceptance.lockstep_tokens_by_position(alphas, np.array([1, 3]), np.array([1, 2]))
    assert got.shape == (2,)
    np.testing.assert_allclose(got, [1.8, 1.84])
    # one γ, a row of batches: B 1 = 1 + .8 + .4; B 2 = 1 + .64 + .16; B 4 = 1 + .4096 + .0256
    got = acceptance.lockstep_tokens_by_position(alphas, 2, np.array([1, 2, 4]))
    assert got.shape == (3,)
    np.testing.assert_allclose(got, [2.2, 1.8, 1.4352])
    # γ down a column, B along a row: shape (2, 3)
    got = acceptance.lockstep_tokens_by_position(alphas, np.array([[1], [2]]), np.array([1, 2, 4]))
    np.testing.assert_allclose(got, [[1.8, 1.64, 1.4096], [2.2, 1.8, 1.4352]])
