import pytest

from service.policy.sglang_adaptive import SglangAdaptivePolicy, Tier
from tests.policy.helpers import batch, stats


def feed(policy, batch_size, accepted, times):
    for _ in range(times):
        policy.observe(stats([policy.steps_for(batch_size)] * batch_size, [accepted] * batch_size, 0.01))


@pytest.mark.parametrize(("batch_size", "steps"), [(1, 3), (7, 3), (8, 3), (31, 3), (32, 1), (64, 0), (500, 0)])
def test_batch_size_picks_the_tier_at_or_below_it(batch_size, steps):
    # SGLang defaults: tier 1 (1,3,5,7), 8 (0,1,3), 32 (0,1), 64 (0,); start at 3 if a candidate, else the middle one
    assert SglangAdaptivePolicy(initial_steps=3).steps_for(batch_size) == steps


def test_no_change_during_warmup_then_every_interval():
    p = SglangAdaptivePolicy(initial_steps=3, warmup=10, interval=5)
    feed(p, 1, 3, 10)  # EMA rises above 2.5 but warmup holds the steps
    assert p.steps_for(1) == 3
    feed(p, 1, 3, 4)
    assert p.steps_for(1) == 3  # 14 updates: not on an interval boundary
    feed(p, 1, 3, 1)
    assert p.steps_for(1) == 5  # 15th update: ema > 3 - 0.5 → step up


@pytest.mark.parametrize(
    ("batch_size", "ema", "start", "expected"),
    [
        # tier 1 (1,3,5,7), down_hysteresis -0.25: step down while ema <= prev - 0.5 - 0.25, else up while ema > cur - 0.5
        (1, 2.30, 3, 3),  # above 1 - 0.75 and not above 2.5: stays
        (1, 0.20, 3, 1),  # <= 0.25: down to the floor
        (1, 2.60, 3, 5),  # > 2.5: up to 5; not > 4.5: stops there
        (1, 6.70, 3, 7),  # climbs through 5 to 7
        (1, 0.10, 5, 1),  # falls through 3 (<= 2.25) and 1 (<= 0.25)
        (1, 1.00, 5, 3),  # falls to 3 only, and a step down never rises in the same decision
        # tier 8 (0,1,3), no hysteresis: down to 0 needs ema <= 0.5
        (8, 0.50, 1, 0),  # the boundary itself steps down
        (8, 0.60, 1, 3),  # > 1 - 0.5: up to 3 (without hysteresis, 1 has no band where it stays)
        (8, 2.40, 3, 3),  # not <= 0.5: stays at the top
    ],
)
def test_threshold_table(batch_size, ema, start, expected):
    state = SglangAdaptivePolicy(initial_steps=start)._tier(batch_size)
    state.ema, state.steps = ema, start
    assert state._next_steps() == expected


def test_ema_follows_mean_accepted_length():
    p = SglangAdaptivePolicy(initial_steps=3, ema_alpha=0.2)
    p.observe(stats([3, 3], [3, 1], 0.01))  # mean 2 accepted
    assert p._tier(2).ema == pytest.approx(0.8 * 2.0 + 0.2 * 2.0)  # started at steps - 1 = 2
    p.observe(stats([3, 3], [0, 0], 0.01))
    assert p._tier(2).ema == pytest.approx(0.8 * 2.0)


def test_zero_step_tier_probes_upward_without_updating_ema():
    tiers = {1: Tier((0, 1, 3))}
    p = SglangAdaptivePolicy(initial_steps=0, tiers=tiers, warmup=0, interval=1)
    state = p._tier(1)
    assert state.steps == 0 and state.ema == -1.0
    p.observe(stats([0], [0], 0.01))
    assert state.steps == 1  # probe the smallest positive step
    assert state.ema == 0.0  # neutral EMA for that step (steps - 1)


def test_every_request_gets_the_tier_steps():
    p = SglangAdaptivePolicy(initial_steps=1)
    d = p.decide(batch(10))
    assert {r.k for r in d.requests} == {1}


@pytest.mark.parametrize("tiers", [{}, {0: Tier((1,))}, {1: Tier(())}, {1: Tier((3, 1))}])
def test_bad_tiers_are_rejected(tiers):
    with pytest.raises(ValueError):
        SglangAdaptivePolicy(tiers=tiers)
