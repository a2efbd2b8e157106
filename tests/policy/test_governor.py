import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.policy.governor import CycleCosts, accepted_drafts, best_k, slo_k_max


def costs(draft=1e-3, pcie_init=0.0, pcie_new=2e-3, verify_fixed=10e-3, verify_token=1e-3):
    return CycleCosts(
        draft=lambda k: draft * k,
        pcie_init=pcie_init,
        pcie_new=lambda k: pcie_new * k,
        verify=lambda n: verify_fixed + verify_token * n,
    )


@pytest.mark.parametrize(
    ("p", "k", "expected"),
    [([0.8], 0, 0.0), ([0.8], 1, 0.8), ([0.8, 0.5], 2, 0.8 + 0.4), ([0.5], 3, 0.5 + 0.25 + 0.125)],
)
def test_accepted_drafts_table(p, k, expected):
    assert accepted_drafts(p, k) == pytest.approx(expected)


def test_cycle_hides_drafting_behind_initial_transfer():
    c = costs(draft=1e-3, pcie_init=5e-3)
    assert c.cycle(3) == pytest.approx(5e-3 + 6e-3 + 10e-3 + 4e-3)  # max(3 ms, 5 ms) + new + verify(4)
    assert c.cycle(8) == pytest.approx(8e-3 + 16e-3 + 10e-3 + 9e-3)


@pytest.mark.parametrize(
    ("p", "expected"),
    [([0.0], 0), ([0.3], 0), ([0.9], 4), ([0.99], 7)],
)
def test_best_k_table(p, expected):
    # Θ(k) = (1 + Σ p^i) / (11 ms + 4 ms·k): good drafts pay up to where p^k falls below the cost slope
    assert best_k(p, costs(), k_limit=7) == expected


def test_slo_bounds_k():
    c = costs()
    assert slo_k_max(c, None, 7) == 7
    assert slo_k_max(c, 20e-3, 7) == 2  # cycle(2) = 6 + 13 = 19 ms, cycle(3) = 23 ms
    assert slo_k_max(c, 5e-3, 7) == 0
    assert best_k([0.99], c, tpot_s=20e-3) == 2


@given(st.lists(st.floats(0, 1), min_size=1, max_size=8), st.floats(5e-3, 0.1), st.integers(0, 8))
def test_chosen_k_never_breaks_the_slo_and_maximises_theta(p, tpot, k_limit):
    c = costs()
    k = best_k(p, c, tpot_s=tpot, k_limit=k_limit)
    assert 0 <= k <= k_limit
    assert c.cycle(k) <= tpot or k == 0
    theta = lambda j: (1 + accepted_drafts(p, j)) / c.cycle(j)  # noqa: E731
    k_max = slo_k_max(c, tpot, k_limit)
    assert all(theta(k) >= theta(j) - 1e-12 for j in range(k_max + 1))
