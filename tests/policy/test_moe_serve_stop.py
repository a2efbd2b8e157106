"""moe-serve's stop where the drafter's chains are gated by an acceptance head (BatchView.gated,
service/policy/moe_serve_stop.py): the per-depth costs it prices and that a gated request needs no first judgement."""

from dataclasses import replace

import pytest

from service.policy.moe_serve_allocate import chains_of
from tests.policy.test_moe_serve import cpu_like, judged_batch


def gated(view, on=True):
    return replace(view, gated=on)


def test_a_gated_request_speculates_before_its_first_judgement():
    """judged_first waits for a request's own judgement because an ungated first draft is verified whatever it is;
    a gated chain's doubtful first draft is cut, so a request on a gating engine speculates on the prior at once."""
    policy = cpu_like(0.9)
    assert [r.k for r in policy.decide(judged_batch(1)).requests] == [0, 0]
    policy = cpu_like(0.9)
    assert all(r.k > 0 for r in policy.decide(gated(judged_batch(1))).requests)
    policy = cpu_like(0.9)
    policy.priced_stop, policy.accept_stop = False, 0.0  # a policy that asks no head: its chains are not gated
    assert [r.k for r in policy.decide(gated(judged_batch(1))).requests] == [0, 0]


def test_the_priced_stop_replaces_the_floor_on_gated_chains_only():
    policy = cpu_like(0.9)
    d = policy.decide(gated(judged_batch(1)))
    assert d.accept_costs and d.accept_stop == 0.0
    policy = cpu_like(0.9)
    policy.judged_first = False
    d = policy.decide(judged_batch(1))  # not gated: it drafts, stopped at the head's floor where there is a head
    assert d.accept_costs == () and d.accept_stop == 0.6 and any(r.k for r in d.requests)
    policy = cpu_like(0.9)
    policy.priced_stop = False
    d = policy.decide(gated(judged_batch(1)))
    assert d.accept_costs == () and d.accept_stop == 0.6 and any(r.k for r in d.requests)


def test_at_batch_1_a_draft_at_its_cost_leaves_the_expected_time_per_token_unchanged():
    """At batch 1 the rule is exact: a draft at depth i whose π_i equals e_{i-1} x cost_i leaves J = T / e where it
    was, by the policy's own prices of the step with and without it (cut at depth i - 1 and i)."""
    policy = cpu_like(0.9)
    view = gated(judged_batch(1, rids=("r0",)))
    probs, ks = [[0.9] * policy.k_max], [4]
    costs = policy._stop_costs(view, probs, ks, ks, set())
    assert len(costs) == 4 and all(c > 0 for c in costs)

    def price(depth, drafting=True):
        return policy._time([depth], drafting, view, chains_of(probs, [depth]))

    forward = price(2) - price(2, False) - (price(1) - price(1, False))
    for i, cost in enumerate(costs, start=1):
        before = price(i - 1) if i > 1 else price(1) - (price(1, False) - price(0, False))
        after = before + price(i, False) - price(i - 1, False) + (forward if i < 4 else 0.0)
        e = 2.0  # any expected tokens of the chain above depth i
        pi = e * cost
        assert after / (e + pi) == pytest.approx(before / e, rel=1e-9)


def test_verified_tokens_that_wake_more_experts_cost_more():
    """The same draft is kept where a verified token costs little and cut where it wakes experts the step did not
    need: a policy whose fit prices experts dearer asks more of the head at every depth."""
    cheap, dear = cpu_like(0.9), cpu_like(0.9)
    dear.model.coef = replace(dear.model.coef, per_expert=dear.model.coef.per_expert * 4)
    view = gated(judged_batch(1, rids=("r0",)))
    probs, ks = [[0.9] * 7], [3]
    low, high = cheap._stop_costs(view, probs, ks, ks, set()), dear._stop_costs(view, probs, ks, ks, set())
    assert all(h > lo for h, lo in zip(high, low, strict=True))


def test_a_judged_request_is_priced_at_its_cap():
    """A judgement replays chains as a verify would keep them, so a step in which nobody drafts but a request is
    judged carries the costs of that request drafting to its cap."""
    policy = cpu_like(0.9)
    view = gated(judged_batch(5, rids=("r0",)))
    probs = [[0.9] * policy.k_max]
    assert policy._stop_costs(view, probs, [0], [4], set()) == ()
    assert len(policy._stop_costs(view, probs, [0], [4], {"r0"})) == 4
