from __future__ import annotations

import pytest

from service.offload.governor import OffloadGovernor, expected_distinct_experts
from service.offload.types import CycleStats, StoreStats

EXPERT_BYTES = 1_000_000


def _cycle(k: int, accepted: int, fetch_s: float, draft_token_s=0.002, verify_s=0.010, misses=4) -> CycleStats:
    verify = StoreStats(requests=8, hits=8 - misses, misses=misses, stall_s=misses * fetch_s)
    window = StoreStats(fetches=misses, fetch_s=misses * fetch_s, fetch_bytes=misses * EXPERT_BYTES)
    return CycleStats(k, accepted, k * draft_token_s, verify_s + verify.stall_s + 0.001 * (k + 1), verify, window)


def _governor(fetch_s: float, accepted=(1, 1, 2)) -> OffloadGovernor:
    """Twelve k=3 cycles cycling through `accepted`: with (1, 1, 2) the first draft always passes, the second about
    half the time, the third rarely (p ≈ 1, 0.46, 0.14)."""
    governor = OffloadGovernor(4, 8, 2, EXPERT_BYTES, resident_fraction=0.25, k_limit=6, initial_k=3)
    for index in range(12):
        governor.observe(_cycle(3, accepted[index % len(accepted)], fetch_s))
    return governor


def test_cold_start_uses_the_initial_k():
    governor = OffloadGovernor(4, 8, 2, EXPERT_BYTES, resident_fraction=0.5, initial_k=2)
    assert governor.costs() is None and governor.choose_k() == 2


def test_slow_fetch_picks_a_smaller_k():
    fast = _governor(fetch_s=1e-5)  # 100 GB/s: transfers are free, the roofline is compute-bound
    slow = _governor(fetch_s=5e-2)  # 20 MB/s: every extra expert a longer draft touches costs 50 ms
    assert fast.bandwidth == pytest.approx(EXPERT_BYTES / 1e-5)
    assert slow.bandwidth == pytest.approx(EXPERT_BYTES / 5e-2)
    # Fast: a second draft costs ~3 ms of compute for ~0.46 tokens, worth it. Slow: it also brings ~1.1 new experts
    # per layer (MoESD N(t)) at 50 ms each, which its ~0.46 tokens no longer amortize.
    assert fast.choose_k() == 2
    assert slow.choose_k() == 1


def test_acceptance_and_costs_are_learnt():
    governor = _governor(fetch_s=1e-3, accepted=(0,))
    assert governor.accept[0] < 0.1  # nothing accepted: p_1 driven to ~0
    assert governor.choose_k() == 0  # drafting cannot pay for itself
    costs = governor.costs()
    assert costs.draft(3) == pytest.approx(0.006)
    assert costs.verify(4) == pytest.approx(0.014)  # wall time minus stalls, flat: only n=4 seen
    assert governor.miss_share == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("tokens,expected", [(1, 2.0), (2, 3.5), (100, 8.0)])
def test_expected_distinct_experts(tokens, expected):
    assert expected_distinct_experts(tokens, 8, 2) == pytest.approx(expected, abs=1e-6)
