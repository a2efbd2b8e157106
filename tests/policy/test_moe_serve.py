from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.policy.acceptance import expected_tokens
from service.policy.base import plan
from service.policy.moe_serve import DEFAULT_PRIOR, MoeServePolicy
from service.policy.types import BatchView, RequestView
from tests.policy.helpers import batch, stats


def trained(n, p_accept, **kw):
    """A policy whose acceptance estimates for r0..r{n-1} are p_accept at every position (cost model = prior); new
    requests are not probed at once unless asked, so a first decision shows the allocation itself."""
    kw.setdefault("probe_new_requests", False)
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=p_accept, **kw)
    for i in range(n):
        policy.accept.get(f"r{i}")
    return policy


@pytest.mark.parametrize(
    ("batch_size", "p_accept", "speculates"),
    [
        (1, 0.5, False),  # sparse MoE, one request: every draft loads ~7 new experts per layer
        (1, 0.95, True),  # ... unless the drafts are almost always right
        (32, 0.5, True),  # moderate batch: experts already loaded, drafts are nearly free
        (32, 0.02, False),  # but never when drafts are always rejected (U_r < 1)
    ],
)
def test_batch_awareness_table(batch_size, p_accept, speculates):
    d = trained(batch_size, p_accept).decide(batch(batch_size))
    assert (sum(r.k for r in d.requests) > 0) == speculates


@pytest.mark.parametrize("batch_size", [1, 4, 16])
@pytest.mark.parametrize("p_accept", [0.02, 0.5, 0.95])
def test_rectangular_verify_gives_the_batch_one_depth(batch_size, p_accept):
    """Where every request verifies the deepest K, a shallower K saves nothing: one depth for all (or none)."""
    ks = {r.k for r in trained(batch_size, p_accept).decide(batch(batch_size, layout="rectangular")).requests}
    assert len(ks) == 1


def test_rectangular_depth_is_the_best_priced_one():
    policy = trained(4, 0.7, k_max=5)
    view = batch(4, layout="rectangular")
    chosen = policy.decide(view).requests[0].k
    chains = [[0.7**i for i in range(1, 6)]] * 4
    keys = {d: policy._objective([d] * 4, chains, float("inf"), True, view) for d in range(6)}
    assert keys[chosen] == min(keys.values())


@pytest.mark.parametrize("p_accept", [0.02, 0.5])
def test_fixed_verify_cost_drafts_the_whole_depth(p_accept):
    """An engine that drafts and verifies the whole depth whatever K is chosen: cutting K only loses tokens."""
    policy = trained(3, p_accept, k_max=3, refit_every=1)
    for _ in range(20):  # what such an engine reports: every step verifies 4 tokens per request, drafting is fixed
        step = stats([3, 3, 3], [0, 0, 0], 0.02, prefix="old")
        policy.observe(replace(step, draft_s=0.005, draft_steps=0, verify_width=4))
    assert policy.model.coef.per_draft_step == 0.0
    d = policy.decide(batch(3, max_k=3, layout="fixed"))
    assert [r.k for r in d.requests] == [3, 3, 3]


def test_speculates_more_at_moderate_batch_than_at_small_batch():
    small = trained(2, 0.8).decide(batch(2))
    moderate = trained(24, 0.8).decide(batch(24))
    mean = lambda d: sum(r.k for r in d.requests) / len(d.requests)  # noqa: E731
    assert mean(moderate) > mean(small)


@pytest.mark.parametrize("batch_size", [8, 16])
def test_requests_with_hopeless_drafts_get_the_shortest_drafts(batch_size):
    policy = trained(batch_size, 0.9)
    for _ in range(40):  # r0 and r1 never get a draft accepted
        for rid in ("r0", "r1"):
            policy.accept.update(rid, 3, 0)
    ks = [r.k for r in policy.decide(batch(batch_size)).requests]
    assert max(ks[:2]) < min(ks[2:])
    assert max(ks[:2]) <= 1  # at most one nearly free draft once the experts are all loaded anyway


def test_probe_interval_doubles_while_probes_do_not_pay():
    policy = trained(1, 0.0, probe_every=4, max_probe_every=64, probe_steps=1)
    probes = []
    for step in range(200):
        d = policy.decide(batch(1))
        k = d.requests[0].k
        if k:
            probes.append(step)
        policy.observe(stats([k], [0], 0.01))
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert probes[0] == 3
    assert gaps[:4] == [8, 16, 32, 64] and set(gaps[4:]) <= {64}


def test_a_new_request_probes_at_once_for_a_phase():
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.0, probe_steps=4, probe_k=2)
    ks = []
    for _ in range(6):
        k = policy.decide(batch(1, max_k=7)).requests[0].k
        ks.append(k)
        policy.observe(stats([k], [0], 0.01))
    assert ks == [2, 2, 2, 2, 0, 0]  # four probe steps at probe_k, then the rejections keep it off


def test_a_probe_sets_the_width_of_a_rectangular_batch():
    policy = trained(4, 0.0, probe_k=3)  # hopeless drafts: K = 0 unless probing
    assert [r.k for r in policy.decide(batch(4, layout="rectangular")).requests] == [0] * 4
    joined = batch(5, layout="rectangular")  # r4 is new and probes; the verify is 4 wide for all
    policy.probe_new_requests = True
    assert [r.k for r in policy.decide(joined).requests] == [3] * 5


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 24),
    p_accept=st.floats(0.0, 1.0),
    tpot=st.floats(5e-3, 0.2),
    max_k=st.integers(0, 7),
)
def test_slo_is_never_broken_when_plain_decode_keeps_it(n, p_accept, tpot, max_k):
    """The batch's mean expected TPOT stays within the target whenever K = 0 for all would (probes included)."""
    policy = trained(n, p_accept, probe_every=1)
    b = batch(n, max_k=max_k, tpot_s=tpot)
    for _ in range(3):
        ks = [r.k for r in policy.decide(b).requests]
        assert all(0 <= k <= max_k for k in ks)
        e = [expected_tokens(policy.accept.get(r.request_id), k) for r, k in zip(b.requests, ks, strict=True)]
        mean_tpot = policy._time(ks, drafting=True) * sum(1 / x for x in e) / n
        plain_within = policy._time([0] * n, drafting=True) <= tpot
        assert mean_tpot <= tpot or not plain_within


def test_a_tpot_target_at_plain_decode_speed_still_allows_speculation():
    """A TPOT SLO is per token: a longer step that emits more tokens per request keeps it (AdaSpec's step cap would
    not)."""
    policy = trained(4, 0.9, k_max=3)
    plain = policy._time([0] * 4, drafting=True, layout=batch(4, layout="rectangular"))
    d = policy.decide(batch(4, max_k=3, tpot_s=plain, layout="rectangular"))
    assert all(r.k > 0 for r in d.requests)


def test_trim_verifies_less_of_a_low_confidence_draft():
    policy = trained(2, 0.9)
    views = (
        RequestView("r0", draft_confidences=(0.95, 0.95, 0.95)),
        RequestView("r1", draft_confidences=(0.9, 0.01, 0.01)),
    )
    b = BatchView(0.0, views, 7)
    d = policy.trim(b, plan(b, [3, 3]))
    assert d.requests[1].verify_len <= 1 < d.requests[0].verify_len


def test_expert_budget_is_passed_per_layer_and_checked():
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=4, expert_budget=32)
    assert policy.decide(batch(2)).expert_budget == (32, 32, 32, 32)
    with pytest.raises(ValueError, match="expert budget"):
        MoeServePolicy(num_experts=64, top_k=8, expert_budget=4)


def test_cost_model_learns_from_observed_steps():
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=4, refit_every=1)
    assert policy.model.coef == DEFAULT_PRIOR
    for i in range(20):
        policy.observe(stats([i % 3] * 4, [0] * 4, 0.02 + 0.001 * (i % 3), unique=(30 + i % 3,) * 4))
    assert policy.model.coef != DEFAULT_PRIOR


def test_a_new_request_starts_from_what_others_measured():
    """Once earlier requests have measured hopeless drafts, a new one neither probes on arrival nor before the
    back-off interval they reached: on short requests, probing each arrival kept the drafter busy for nothing."""
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.5, probe_steps=4, probe_k=2)
    ks = []
    for step in range(40):
        prefix = f"req{step // 10}-"  # a new request every 10 steps
        k = policy.decide(batch(1, max_k=7, prefix=prefix)).requests[0].k
        ks.append(k)
        policy.observe(stats([k], [0], 0.01, prefix=prefix))
    # the first two requests probe at once: the prior is a guess until `trust` (8) first drafts were judged
    assert ks[:4] == [2, 2, 2, 2] and ks[10:14] == [2, 2, 2, 2]
    assert policy.accept.prior_trusted()
    assert sum(ks[20:]) == 0  # later arrivals inherit the measured prior and the back-off: no probe within 10 steps
