import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.policy.cascade import CascadePolicy
from tests.policy.helpers import batch, stats

BASE_S = 0.01  # seconds per plain-decode step


def step(policy, n, cost_per_draft, accept):
    """One step: decide, then report a step time of BASE_S·(1 + cost·ΣK) and `accept(k)` accepted drafts."""
    d = policy.decide(batch(n))
    ks = [r.k for r in d.requests]
    policy.observe(stats(ks, [accept(k) for k in ks], BASE_S * (1 + cost_per_draft * sum(ks))))
    return ks


def test_first_steps_measure_the_baseline_without_speculation():
    p = CascadePolicy(baseline_iters=4, align=1)
    assert [step(p, 1, 0.1, lambda k: k)[0] for _ in range(5)] == [0, 0, 0, 0, 3]
    assert p.baseline.get(1) == pytest.approx(BASE_S)


def test_baseline_is_refreshed_every_hundred_steps():
    p = CascadePolicy(refresh_every=100, align=1)
    ks = [step(p, 1, 0.05, lambda k: k)[0] for _ in range(220)]
    forced = [i for i, k in enumerate(ks) if k == 0]
    assert forced[:4] == [0, 1, 2, 3]
    assert len(forced) == 6  # the first 4, then one more every 100 steps
    assert forced[4] == 103 and forced[5] == 203


def test_useless_speculation_is_disabled_after_descending_to_k1():
    p = CascadePolicy(align=1)
    trace = [step(p, 1, 0.5, lambda k: 0)[0] for _ in range(4 + 12 + 1)]
    # utility = 1 / (1 + 0.5K) < 1: trials at K=3, 2, 1 (4 steps each), then the set phase runs K=0
    assert trace == [0] * 4 + [3] * 4 + [2] * 4 + [1] * 4 + [0]
    assert p.state_of("r0").set_len == 32


def test_back_off_doubles_the_set_phase_on_every_switch_to_zero():
    p = CascadePolicy(align=1, max_set_iters=10_000)
    lengths = []
    for _ in range(2000):
        step(p, 1, 0.5, lambda k: 0)
        s = p.state_of("r0")
        if s is not None and not s.testing and (not lengths or lengths[-1] != s.set_len):
            lengths.append(s.set_len)
    assert lengths[:5] == [32, 64, 128, 256, 512]


def test_useful_speculation_climbs_and_resets_back_off():
    p = CascadePolicy(align=1, k_max=7)
    trace = [step(p, 1, 0.1, lambda k: k)[0] for _ in range(4 + 16 + 3)]
    # every draft accepted and cheap: utility grows with K, so the climb goes 3 → 4 → 5 → 6, then sets 6
    assert trace[4:20] == [3] * 4 + [4] * 4 + [5] * 4 + [6] * 4
    s = p.state_of("r0")
    assert not s.testing and s.k == 6 and s.set_len == 16


def test_test_phases_start_on_the_batch_clock():
    p = CascadePolicy(align=32)
    starts = []
    for _ in range(400):
        before = p.state_of("r0")
        was_testing = before.testing if before else None
        step(p, 3, 0.5, lambda k: 0)
        after = p.state_of("r0")
        if after and after.testing and was_testing is False:
            starts.append(p._clock)
    assert starts and all(c % 32 == 0 for c in starts)


@settings(max_examples=25, deadline=None)
@given(cost=st.floats(0.0, 1.0), accept_frac=st.floats(0.0, 1.0), n=st.integers(1, 6), k_max=st.integers(1, 7))
def test_k_stays_within_bounds_and_zero_only_when_disabled(cost, accept_frac, n, k_max):
    p = CascadePolicy(k_max=k_max, k_start=min(3, k_max))
    for _ in range(150):
        ks = step(p, n, cost, lambda k: int(k * accept_frac))
        assert all(0 <= k <= k_max for k in ks)
