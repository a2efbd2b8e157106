from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.policy.acceptance import AcceptanceTracker, expected_tokens
from service.policy.base import plan
from service.policy.expert_routing import SplitAffinity
from service.policy.moe_serve import DEFAULT_PRIOR, MoeServePolicy
from service.policy.step_pricer import StepPricer
from service.policy.types import BatchView, RequestStepStats, RequestView, ShadowOutcome, SloClass
from tests.policy.helpers import batch, stats


def trained(n, p_accept, **kw):
    """A policy whose acceptance estimates for r0..r{n-1} are p_accept at every position (cost model = prior); new
    requests are not probed at once unless asked, so a first decision shows the allocation itself."""
    kw.setdefault("probe_new_requests", False)
    kw.setdefault("warm_up", False)  # decisions on the prior from the first step
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
    policy = MoeServePolicy(
        num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.0, probe_steps=4, probe_k=2, warm_up=False
    )
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


def arrivals(policy, requests, accepted_by, steps_each=10):
    """One request at a time, a new one every `steps_each` steps; request j accepts `accepted_by(j)` of its drafts."""
    ks = []
    for step in range(requests * steps_each):
        j = step // steps_each
        prefix = f"req{j}-"
        k = policy.decide(batch(1, max_k=7, prefix=prefix)).requests[0].k
        ks.append(k)
        policy.observe(stats([k], [min(k, accepted_by(j))], 0.01, prefix=prefix))
    return [ks[j * steps_each : (j + 1) * steps_each] for j in range(requests)]


def test_every_new_request_probes_once_however_the_earlier_ones_did():
    """Hopeless drafts for a long while, then requests whose drafts are all accepted: nothing at arrival tells them
    apart, so each arrival probes for one step; the hopeless ones then stay at K = 0 for the rest of their short
    life (the back-off interval others reached), the first good one speculates from its probe on and the next ones
    from the prior it raised."""
    policy = MoeServePolicy(
        num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.5, refit_every=10_000, warm_up=False
    )
    per_request = arrivals(policy, 16, lambda j: 0 if j < 12 else 7)
    assert policy.accept.prior_trusted()
    assert all(ks[0] == 3 for ks in per_request[:13])  # a probe at probe_k, one step
    assert all(sum(ks[1:]) == 0 for ks in per_request[:12])
    assert all(min(ks) > 0 for ks in per_request[12:]), per_request[12:]


def test_new_requests_keep_drafting_where_some_drafts_pay():
    """A workload where every fourth request's drafts are all accepted (cost model = the prior): every arrival
    drafts at its first step (a probe, or the learnt prior), the good ones then speculate to the end and the others
    fall back to K = 0 after one step, or after one more one-draft step where the prior counts as 2 outcomes in a
    request's own estimate (moe-serve's default: one rejected draft leaves p at 2/3 of the prior, not 1/3)."""
    for weight, second in ((0.5, 0), (2.0, 1)):
        policy = MoeServePolicy(
            num_experts=64,
            top_k=8,
            num_layers=16,
            acceptance_prior=0.5,
            acceptance_prior_weight=weight,
            refit_every=10_000,
            warm_up=False,
        )
        per_request = arrivals(policy, 20, lambda j: 7 if j % 4 == 0 else 0)
        assert all(ks[0] > 0 for ks in per_request), per_request
        for j, ks in enumerate(per_request):
            if j % 4 == 0:
                assert min(ks) > 0 and ks[-1] == 7, (j, ks)
            else:
                assert ks[1] <= second and sum(ks[2:]) == 0, (j, ks)


def drafted(n, depth, prefix="r"):
    view = batch(n, prefix=prefix)
    return replace(view, requests=tuple(replace(r, draft_depth=depth) for r in view.requests))


def test_judged_drafts_set_each_requests_acceptance_without_probes():
    """Requests whose drafts are in hand (NGRAM) and judged by the engine while at K = 0 (StepStats.shadow; the
    cost model stays the prior, under which accepted drafts pay at batch 2): two
    requests with drafts of one depth, one whose drafts the emitted tokens keep matching and one whose they never
    do, end with different K, and neither is ever probed."""
    policy = MoeServePolicy(
        num_experts=8, top_k=2, num_layers=16, acceptance_prior=0.3, probe_every=2, refit_every=10_000, warm_up=False
    )
    for _ in range(30):
        d = policy.decide(drafted(2, depth=4))
        ks = [r.k for r in d.requests]
        shadow = tuple(ShadowOutcome(f"r{i}", 4, 4, 4) if i == 0 else ShadowOutcome("r1", 4, 1, 0) for i in (0, 1))
        policy.observe(replace(stats(ks, [ks[0], 0], 0.01), shadow=shadow))
        assert not policy._probing  # never probed: their drafts are judged for free
    assert ks[1] == 0 and ks[0] > 0 and policy.accept.get("r0")[0] > 0.9 > 0.1 > policy.accept.get("r1")[0]
    # a new request with drafts of that depth waits for its own first judgement (judged_first, the default), or
    # starts from what the depth achieved across both requests
    assert set(policy._drafted_probs("new", 4)) == {0.0}
    policy.judged_first = False
    assert policy._drafted_probs("new", 4) == policy.by_depth.get("draft-depth-4")


def test_a_request_whose_own_drafts_were_only_rejected_waits_however_well_the_depth_did():
    """A depth whose drafts earlier requests had accepted (the depth prior near 1, drafts paying at batch 1 under
    the prior cost model): a new request whose first judged draft is rejected stays at K = 0 (judged_first: one of
    its own drafts accepted first), and speculates once a judged draft of its own is accepted."""
    policy = MoeServePolicy(
        num_experts=8, top_k=2, num_layers=16, acceptance_prior=0.5, refit_every=10_000, warm_up=False
    )
    for _ in range(20):  # earlier requests: every draft of depth 4 accepted
        d = policy.decide(drafted(1, depth=4, prefix="old"))
        k = d.requests[0].k
        shadow = (ShadowOutcome("old0", 4, 4, 4),) if k == 0 else ()
        policy.observe(replace(stats([k], [k], 0.01, prefix="old"), shadow=shadow))
    assert policy.by_depth.get("draft-depth-4")[0] > 0.9 and k > 0  # they paid
    ks = []
    for outcome in (0, 0, 0, 4, None):  # the new request's judged drafts: three rejected, then one accepted
        k = policy.decide(drafted(1, depth=4, prefix="new")).requests[0].k
        ks.append(k)
        shadow = () if outcome is None else (ShadowOutcome("new0", 4, 4 if outcome else 1, outcome),)
        policy.observe(replace(stats([k], [0], 0.01, prefix="new"), shadow=shadow))
    assert ks[:4] == [0, 0, 0, 0] and ks[4] > 0, ks
    policy.judged_first = False  # without the rule, the depth prior alone decides a new request
    assert policy._drafted_probs("another", 4) == policy.by_depth.get("draft-depth-4")


def test_a_batch_with_nothing_drafted_is_not_priced(monkeypatch):
    """No NGRAM match for anyone (draft depth 0): K = 0 is the only choice, decided without asking the cost model."""
    policy = trained(2, 0.9)

    def priced(*args, **kwargs):
        raise AssertionError("allocate was asked")

    monkeypatch.setattr(policy, "allocate", priced)
    assert [r.k for r in policy.decide(drafted(2, depth=0)).requests] == [0, 0]


def lagging(n, backlog, tokens_left, prefix="r"):
    """A batch whose requests' draft caches lag `backlog` tokens (STANDALONE's lazy catch-up)."""
    view = batch(n, prefix=prefix)
    return replace(
        view, requests=tuple(replace(r, draft_backlog=backlog, tokens_left=tokens_left) for r in view.requests)
    )


@pytest.mark.parametrize(("backlog", "tokens_left", "probes"), [(0, 20, True), (5_000, 20, False), (5_000, None, True)])
def test_a_new_request_probes_only_where_the_catch_up_can_be_repaid(backlog, tokens_left, probes):
    """The probe of a new request runs the draft model over its whole context first: with a long context and few
    tokens left to gain on, speculation could never repay it (cost model = the prior: a catch-up token costs what a
    draft token does, 5 000 of them ~20 plain steps)."""
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.5, warm_up=False)
    k = policy.decide(lagging(1, backlog, tokens_left)).requests[0].k
    assert (k == policy.probe_k) is probes


def test_a_lagging_request_speculates_when_its_life_repays_the_catch_up():
    """Drafts that are nearly always right: a long remaining life amortises the catch-up, a short one does not."""
    long_life, short_life = trained(1, 0.99), trained(1, 0.99)
    assert long_life.decide(lagging(1, 2_000, 4_000)).requests[0].k > 0
    assert short_life.decide(lagging(1, 2_000, 2)).requests[0].k == 0


def test_no_more_drafts_than_tokens_left():
    policy = trained(1, 0.99)
    assert policy.decide(lagging(1, 0, 3)).requests[0].k == 2
    assert policy.decide(lagging(1, 0, 1)).requests[0].k == 0


def test_a_tpot_target_sees_the_catch_up_spread_over_the_request_not_in_one_step():
    """A TPOT target is a mean over a request's tokens: the one-time catch-up of a probe (whole, it would put this
    step's J over the target) must not veto the probe of a request with a long life ahead."""
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.5, warm_up=False)
    e = expected_tokens([0.5] * 3, 3)
    whole = policy.model.step_time(4, 1, 3, 3, backlog_tokens=400) / e  # the probe step's J, catch-up whole
    spread = policy.model.step_time(4, 1, 3, 3, backlog_tokens=400 * e / 200) / e  # its share over 200 tokens
    target = (whole + spread) / 2
    view = lagging(1, 400, 200)
    view = replace(view, requests=tuple(replace(r, slo=SloClass("t", tpot_s=target)) for r in view.requests))
    assert policy.decide(view).requests[0].k == policy.probe_k


@pytest.mark.parametrize("warm_up", [True, False])
def test_the_first_measured_steps_replace_the_priors_scale(warm_up):
    """The prior is a GPU's: after a couple of measured steps (not after refit_every = 16) the plain step is
    priced at what it measured, 30 ms on the CPU engine against the prior's few ms."""
    policy = MoeServePolicy(num_experts=32, top_k=4, num_layers=4, warm_up=warm_up)
    for _ in range(2):
        policy.observe(replace(stats([0], [0], 0.03), plain=True))
    predicted = policy.model.step_time(1, 1, 0, 0)
    if warm_up:
        assert predicted == pytest.approx(0.03, rel=0.05)
    else:
        assert policy.model.coef == DEFAULT_PRIOR and predicted < 0.01


@pytest.mark.parametrize(("tokens_so_far", "probes"), [(400, True), (0, False)])  # lives of 410 and 10 tokens
def test_a_probe_is_held_to_a_tpot_target_spread_over_the_requests_whole_life(tokens_so_far, probes):
    """A target 10 % above a plain step, which the probe step alone far exceeds: spread over a 410-token life the
    probe adds a few percent and runs; over a 10-token life it would break the target and does not."""
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.5, warm_up=False)
    plain = policy.model.step_time(1, 1, 0, 0)
    probe = policy.model.step_time(4, 1, 3, 3)
    assert probe / expected_tokens([0.5] * 3, 3) > 1.1 * plain  # the one-step test vetoes either probe
    view = lagging(1, 0, 10)
    slo = SloClass("t", tpot_s=1.1 * plain)
    view = replace(view, requests=tuple(replace(r, slo=slo, tokens_so_far=tokens_so_far) for r in view.requests))
    assert (policy.decide(view).requests[0].k == policy.probe_k) is probes


def test_a_request_likely_to_be_accepted_is_priced_by_what_accepted_drafts_cost():
    """The CPU engine's STANDALONE steps at batch 1 (moe-fine x48): 4-token verifies whose drafts were accepted hit
    one token's experts and cost ~1.4x a plain step, rejected ones ~2.5x. A request at p = 0.6 gains from K > 0
    only at the accepted drafts' price, which the single affinity (learnt mostly from rejected steps) does not
    give it. The split alone here (the calibration off): step_calibration's groups by outcome are a second way
    to the same price (next test)."""
    policy = accepted_and_rejected_steps(calibrate=False)
    probs = [[0.6] * 3]
    assert policy.allocate(probs, [3], float("inf"), drafting=True) != [0]
    policy.model.routing(1).split = SplitAffinity()  # forget the split: the single affinity prices every draft alike
    assert policy.allocate(probs, [3], float("inf"), drafting=True) == [0]


def test_the_calibration_prices_mostly_accepted_steps_by_their_own_ratio():
    """The steps of the test above, the split forgotten: the calibration's group of mostly accepted 3-draft steps
    (measured below the single affinity's price) and its group of rejected ones (the median of all) price a request at
    p = 0.6 apart, so it speculates; one ratio over all of them would not let it (step_calibration.Calibration)."""
    policy = accepted_and_rejected_steps(calibrate=True)
    policy.model.routing(1).split = SplitAffinity()
    probs = [[0.6] * 3]
    assert policy.allocate(probs, [3], float("inf"), drafting=True) != [0]
    calibration = policy.model._calibration[1]
    assert calibration.ratio_for(3, 1.0) < calibration.ratio <= calibration.ratio_for(3, 0.0)


def accepted_and_rejected_steps(calibrate: bool) -> MoeServePolicy:
    policy = MoeServePolicy(num_experts=32, top_k=4, num_layers=4, refit_every=10_000, warm_up=False)
    policy.model.calibrate = calibrate
    plain = replace(stats([0], [0], 0.0294 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)
    good = stats([3], [3], 0.0404 / 0.9, unique=(4,) * 4)
    bad = stats([3], [0], 0.074 / 0.9, unique=(10,) * 4)
    for step in [plain] * 8 + [good, bad, bad, bad] * 5:
        policy.observe(step)
    policy.model.refit()
    return policy


def cpu_like(acceptance_prior):
    """A policy whose cost model was fitted on steps like the CPU engine's (moe-fine x48, STANDALONE, batch 1): a
    plain step ~29 ms; K drafts cost 5.5 ms each to draft and ~3.6 ms each to verify when accepted (one token's
    experts), ~15 ms each when rejected (fresh experts); acceptance: `acceptance_prior` for every request."""
    policy = MoeServePolicy(
        num_experts=32,
        top_k=4,
        num_layers=4,
        acceptance_prior=acceptance_prior,
        refit_every=10_000,
        warm_up=False,
    )
    steps = [replace(stats([0], [0], 0.0294 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)] * 8
    for k in (1, 2, 3):
        good = replace(stats([k], [k], (0.0294 + 0.0036 * k) / 0.9, unique=(4,) * 4), draft_s=0.0055 * k)
        bad = replace(stats([k], [0], (0.0294 + 0.0149 * k) / 0.9, unique=(4 + 2 * k,) * 4), draft_s=0.0055 * k)
        steps += [good, bad] * 3
    for step in steps:
        policy.observe(step)
    policy.model.refit()
    policy.accept = AcceptanceTracker(policy.k_max, prior=acceptance_prior)  # the steps' outcomes were made up
    return policy


@pytest.mark.parametrize("acceptance_prior", [0.05, 0.3])
@pytest.mark.parametrize(("hope", "probes"), [(0.05, False), (0.5, False), (0.8, True), (0.95, True)])
def test_the_probe_gate_prices_the_hoped_for_acceptance_not_the_learnt_mean(acceptance_prior, hope, probes):
    """Whether a probe can repay itself is judged at the acceptance it hopes to find, priced by the cost model (a
    step grows with its drafts), however low the requests before drove the acceptance prior: gated on the learnt
    mean, STANDALONE prose at batch 8 after code and math never probed (p = 0.15 for every request) and read 1.00x
    of none's TPOT where static K = 3 read 0.58x."""
    policy = cpu_like(acceptance_prior)
    policy.probe_hope = hope
    view = lagging(1, 100, 32)
    assert policy._probes_pay([0], [0], [policy.accept.get("r0")], [3], view) is probes


def test_probes_due_together_are_priced_together():
    """Drafting is batch-wide: one request drafting alone makes its 7 neighbours wait for the draft steps, eight
    drafting together share them. A wave of 8 new requests probes; one new request among 7 that do not speculate
    does not."""
    policy = cpu_like(0.15)
    view = lagging(8, 100, 32)
    probs = [policy.accept.get(f"r{i}") for i in range(8)]
    assert policy._probes_pay(list(range(8)), [0] * 8, probs, [3] * 8, view)
    assert not policy._probes_pay([0], [0] * 8, probs, [3] * 8, view)


def test_a_wave_of_new_requests_probes_together():
    policy = cpu_like(0.15)
    d = policy.decide(lagging(8, 100, 32, prefix="n"))
    assert policy._probing == {f"n{i}" for i in range(8)}
    assert {r.k for r in d.requests} == {policy.probe_k}


def test_probe_hope_is_checked():
    with pytest.raises(ValueError, match="probe_hope"):
        MoeServePolicy(probe_hope=0.0)


def test_nothing_speculates_before_a_step_was_measured():
    """The prior is a GPU's: on the CPU engine it priced a first step of 8 requests at K = 2 at 31 ms (it took
    325 ms). With warm-up (the default) the first step is a plain one; the next decides on what it measured."""
    policy = MoeServePolicy(num_experts=64, top_k=8, num_layers=16, acceptance_prior=0.95)
    assert {r.k for r in policy.decide(batch(8)).requests} == {0}
    assert not policy._probing
    policy.observe(replace(stats([0] * 8, [0] * 8, 0.15, unique=(30,) * 16), plain=True, draft_steps=0))
    assert {r.k for r in policy.decide(batch(8)).requests} != {0}


def judged_batch(tokens_so_far, rids=("r0", "r1")):
    """A STANDALONE-like batch (plans before drafting) on an engine that can judge the drafter (BatchView.judging)."""
    requests = tuple(RequestView(rid, tokens_so_far=tokens_so_far, draft_backlog=100, tokens_left=64) for rid in rids)
    return BatchView(now=0.0, requests=requests, max_k=4, judging=True)


def test_a_judging_engine_judges_new_requests_instead_of_probing_them():
    """Where the engine can judge a drafter without a verify, a new request is not probed (a probe verified 3
    drafts and caught the draft model up: ~10 % of a 32-token request's TPOT in the CPU engine's STANDALONE cells,
    the whole of moe-serve's loss there); once it has emitted `judge_after` tokens it is judged, and what the
    judgement found decides (not the acceptance earlier requests left, judged_first): the request whose drafts
    match speculates, the other stays at K = 0 and is judged again after the back-off interval, which doubles
    (drafting runs for the first anyway, so its drafts could pay at an optimistic bound on what it measured); in
    between it rests, since nothing about its drafts is measured at K = 0."""
    policy = cpu_like(0.9)  # requests before found drafts that pay; these two wait for their own judgement anyway
    for t in range(1, policy.judge_after):
        d = policy.decide(judged_batch(t))
        assert [r.k for r in d.requests] == [0, 0] and not d.judge and not policy._probing
    d = policy.decide(judged_batch(policy.judge_after))
    assert d.judge == {"r0", "r1"} and [r.k for r in d.requests] == [0, 0]
    shadow = tuple(ShadowOutcome("r0", 4, 4, 4) for _ in range(4)) + tuple(
        ShadowOutcome("r1", 4, 1, 0) for _ in range(4)
    )
    policy.observe(replace(stats([0, 0], [0, 0], 0.03), shadow=shadow, plain=True))
    view = judged_batch(policy.judge_after + 1)
    view = replace(view, requests=tuple(replace(r, draft_backlog=0) for r in view.requests))  # caught up by the judge
    judged_again, awake, rest_end = [], [], 0
    for step in range(12):
        d = policy.decide(emitted(view, step))
        assert d.requests[0].k > 0 and d.requests[1].k == 0, step
        judged_again += [step] * ("r1" in d.judge)
        awake += [step] * (step >= rest_end)
        rest_end = d.rest_until[1] - view.requests[1].tokens_so_far if d.rest_until else 0
        assert "r0" not in d.judge
    assert judged_again == [3, 11]  # after judge_after = 4 steps at K = 0, then after 8
    assert awake == [0, 3, 4, 11]  # in between it rests until its judgement is due (max_rest = 16 steps at most)


@pytest.mark.parametrize(("beside", "judge_after", "first"), [(False, None, 4), (True, None, 2), (True, 3, 3)])
def test_a_first_judgement_comes_sooner_where_judgements_run_beside_the_target(beside, judge_after, first):
    """Where the engine runs a judgement's draft forward beside the target's (BatchView.judge_beside: moe-serve's
    STANDALONE with its draft thread), the step waits for almost none of it, so a request is judged after 2 emitted
    tokens instead of 4 and, while it stays at K = 0, again after 2 steps instead of 4
    (moe_serve_probe.JUDGE_AFTER_BESIDE); `judge_after` set is kept either way."""
    policy = cpu_like(0.9)
    policy._judge_after = judge_after  # as MoeServePolicy(judge_after=...) sets it; cpu_like builds with the default
    view = replace(judged_batch(1), judge_beside=beside)
    due = [bool(policy.decide(emitted(view, t - 1)).judge) for t in range(1, first + 1)]
    assert due == [False] * (first - 1) + [True] and policy.judge_after == first
    assert policy._interval["r0"] == first  # judged again after as many steps at K = 0


def test_judge_after_is_checked():
    with pytest.raises(ValueError, match="judge_after"):
        MoeServePolicy(judge_after=0)


def emitted(view: BatchView, steps: int) -> BatchView:
    """`view` after `steps` plain steps: each request emitted one token a step."""
    return replace(view, requests=tuple(replace(r, tokens_so_far=r.tokens_so_far + steps) for r in view.requests))


def judged_once(hits: dict[str, tuple[int, ...]]) -> tuple[MoeServePolicy, BatchView]:
    """cpu_like(0.9) after the first judgement of r0 and r1 found `hits` (first drafts matched or not)."""
    policy = cpu_like(0.9)
    for t in range(1, policy.judge_after + 1):
        policy.decide(judged_batch(t))
    shadow = tuple(ShadowOutcome(rid, 4, 1, hit) for rid, found in hits.items() for hit in found)
    policy.observe(replace(stats([0, 0], [0, 0], 0.03), shadow=shadow, plain=True))
    view = judged_batch(policy.judge_after + 1)
    return policy, replace(view, requests=tuple(replace(r, draft_backlog=0) for r in view.requests))


@pytest.mark.parametrize(
    ("hits", "judged_again"),
    [
        ({"r0": (0, 0, 0, 0), "r1": (1, 0, 0, 0)}, set()),  # neither could pay at its bound: no judgement
        ({"r0": (0, 0, 0, 0), "r1": (1, 1, 0, 0)}, {"r1"}),  # r1's bound clears batch 2's break-even
        ({"r0": (0, 0, 0, 0), "r1": (1,) * 8 + (0,) * 8}, set()),  # as many matched, on more outcomes: it cannot
        ({"r0": (0, 0, 0, 0), "r1": (1, 1, 1, 0)}, {"r0"}),  # r1 speculates: drafting is paid, r0's could pay
    ],
)
def test_a_request_is_judged_again_only_where_its_drafts_could_pay(hits, judged_again):
    """A judgement due again is skipped where the request would not speculate even at an optimistic bound on the
    acceptance it measured (a judgement costs a draft forward: 5-6 ms at batch 1 on moe-fine x48 STANDALONE, up
    to 3 per 32-token request that never speculated); the back-off interval doubles either way."""
    policy, view = judged_once(hits)
    seen: set[str] = set()
    due = []
    for step in range(12):
        d = policy.decide(emitted(view, step))
        seen |= d.judge
        due += [step] * bool(d.judge)
    assert seen == judged_again
    assert due == ([3, 11] if judged_again else [])
    assert policy._interval["r0"] == 4 * policy.judge_after  # doubled twice, judged or not


def test_a_request_capped_at_k0_is_never_judged():
    policy = cpu_like(0.5)
    view = judged_batch(10)
    assert not policy.decide(replace(view, requests=(replace(view.requests[0], tokens_left=0),))).judge
    assert not MoeServePolicy(k_max=0, warm_up=False).decide(view).judge


def test_a_request_not_yet_judged_speculates_on_the_prior_without_judged_first():
    policy = cpu_like(0.9)
    policy.judged_first = False
    assert all(r.k > 0 for r in policy.decide(judged_batch(1)).requests)


def test_without_judging_a_new_request_still_probes():
    policy = cpu_like(0.3)
    d = policy.decide(replace(judged_batch(1, rids=("r0",)), judging=False))
    assert d.requests[0].k == policy.probe_k and policy._probing == {"r0"} and not d.judge


@pytest.mark.parametrize(("error", "speculates"), [(0.0, True), (0.1, False)])
def test_a_gain_within_the_cost_models_error_is_not_bet_on(monkeypatch, error, speculates):
    """Speculation is chosen over K = 0 only where J falls by more than the cost model's measured error at that batch
    size: a request that gains ~5 % by the model stays plain where the model's steps were off by 10 %."""
    policy = trained(1, 0.7)
    view = batch(1)
    probs, caps = [[0.7] * policy.k_max], [policy.k_max]
    monkeypatch.setattr(policy.model, "error", lambda requests, draft_steps=None: 0.0)
    best = policy.allocate(probs, caps, float("inf"), drafting=True, layout=view)
    chains = [[0.7 ** (i + 1) for i in range(policy.k_max)]]
    gain = (
        1
        - policy._objective(best, chains, float("inf"), True, view)[1]
        / policy._objective([0], chains, float("inf"), True, view)[1]
    )
    assert best[0] > 0 and 0.0 < gain < 0.1  # the prior prices this request's drafts as a small win
    monkeypatch.setattr(policy.model, "error", lambda requests, draft_steps=None: error)
    ks = policy.allocate(probs, caps, float("inf"), drafting=True, layout=view)
    assert (ks[0] > 0) == speculates


def test_drafts_that_cannot_be_accepted_are_never_bet_on(monkeypatch):
    """A draft accepted with probability 0 only adds time, whatever the prices say: calibrated prices of plain and
    speculative steps come from different steps (on the CPU engine a burst of load on the plain steps priced them
    ~15 % dearer than the steps after it were), and here a one-draft step is priced 2 % under a plain one, beyond the 1 %
    margin. Requests not judged yet (judged_first: p = 0) stay plain; one judged at p > 0 may speculate."""
    policy = cpu_like(0.9)

    def step(pricer, tokens, draft_steps, draft_tokens, backlog=0.0, accepted=None):
        return 0.020 if tokens <= pricer.requests else 0.0196

    monkeypatch.setattr(StepPricer, "step", step)  # every step price of every model, variants included
    unjudged = policy.decide(judged_batch(policy.judge_after - 1))
    assert [r.k for r in unjudged.requests] == [0, 0] and not unjudged.judge
    policy.accept.update("r0", 3, 3)  # r0's judgement found its drafts accepted
    judged = policy.decide(judged_batch(policy.judge_after - 1))
    assert judged.requests[0].k > 0


def test_a_draft_depth_the_model_has_not_measured_carries_no_margin(monkeypatch):
    """The margin is the error measured on steps of the same draft depth (StepTimeModel.error): a depth the policy
    never ran has no measured error, so its first bets are made (at batch 1 on the CPU engine moe-serve ran one-
    and two-draft steps only, and a prose request at p = 0.94, priced 5 % better at K = 3, stayed plain under the
    one-draft steps' 7.7 %)."""
    policy = trained(1, 0.7)
    view = batch(1)
    probs, caps = [[0.7] * policy.k_max], [policy.k_max]
    monkeypatch.setattr(policy.model, "error", lambda requests, draft_steps=None: 0.1)
    assert policy.allocate(probs, caps, float("inf"), drafting=True, layout=view) == [0]
    monkeypatch.setattr(policy.model, "error", lambda requests, draft_steps=None: 0.1 if draft_steps == 1 else None)
    assert policy.allocate(probs, caps, float("inf"), drafting=True, layout=view)[0] > 1


def fresh_accepted_steps() -> MoeServePolicy:
    """Fitted on batch-1 steps like code's on the CPU engine (moe-fine x48): a plain step 25 ms; a draft accepted
    routed to fresh experts (8 per layer for a 1-draft verify, 40-65 ms), a rejected one to fresh experts or to the
    root's. Calibration off: the fit alone; new requests not probed: the allocation alone."""
    policy = MoeServePolicy(
        num_experts=32,
        top_k=4,
        num_layers=4,
        acceptance_prior=0.75,
        refit_every=10_000,
        warm_up=False,
        probe_new_requests=False,
    )
    policy.model.calibrate = False
    plain = replace(stats([0], [0], 0.025 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)
    steps = [plain] * 8
    for k in (1, 2, 3):
        good = replace(stats([k], [k], (0.025 + 0.04 * k) / 0.9, unique=(4 + 4 * k,) * 4), draft_s=0.005 * k)
        bad = replace(stats([k], [0], (0.025 + 0.04 * k) / 0.9, unique=(4 + 4 * k,) * 4), draft_s=0.005 * k)
        reused = replace(stats([k], [0], (0.025 + 0.002 * k) / 0.9, unique=(4,) * 4), draft_s=0.005 * k)
        steps += [good, bad, reused] * 3
    for step in steps:
        policy.observe(step)
    policy.model.refit()
    policy.accept = AcceptanceTracker(policy.k_max, prior=0.75)  # the steps' outcomes were made up
    return policy


@pytest.mark.parametrize(("reuse", "speculates"), [(None, False), (0.0, False), (1.0, True)])
def test_accepted_drafts_are_priced_at_the_requests_own_expert_reuse(reuse, speculates):
    """A request whose plain-decoded tokens each reuse the experts of the one before (prose on the CPU engine) has
    its accepted drafts priced at that reuse, not at the bucket's split learnt from requests whose accepted drafts
    routed to fresh experts; one whose tokens reuse nothing, or that measured nothing, keeps the split's price."""
    policy = fresh_accepted_steps()
    if reuse is not None:
        for _ in range(3):
            step = replace(stats([0], [0], 0.025 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)
            policy.observe(replace(step, requests=(RequestStepStats("r0", 0, 0, reuse),)))
    assert (policy.decide(batch(1, max_k=3)).requests[0].k > 0) == speculates


@pytest.mark.parametrize(("reuse", "verifies"), [(None, False), (1.0, True)])
def test_every_allocation_for_a_batch_prices_its_own_expert_reuse(reuse, verifies):
    """Not only the first allocation of a step: the trim's re-run on the drafts in hand (drafting cost sunk) prices
    accepted drafts at the batch's own reuse too, so it does not undo what the allocation chose."""
    policy = fresh_accepted_steps()
    if reuse is not None:
        step = replace(stats([0], [0], 0.025 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)
        policy.observe(replace(step, requests=(RequestStepStats("r0", 0, 0, reuse),)))
    lens = policy.allocate([[0.5] * 3], [3], float("inf"), drafting=False, layout=batch(1, max_k=3))
    assert (lens[0] > 0) == verifies


def test_expert_reuse_is_checked():
    with pytest.raises(ValueError, match="expert_reuse"):
        RequestStepStats("r0", 0, 0, 1.5)


def test_own_acceptance_follows_a_text_that_turns_predictable():
    """A request whose first drafts fail and whose later ones are accepted (NGRAM code at batch 1 in the CPU engine:
    six one-token rejections, then the engine's judged drafts accepted 3 of 3 step after step): its own estimate
    follows within a few outcomes; a running mean over all of them (acceptance_alpha = 0.1) had it speculate from
    its 28th token of 32."""
    outcomes = [ShadowOutcome("r0", 3, 1, 0)] * 6 + [ShadowOutcome("r0", 3, 3, 3)] * 3
    p_first = {}
    for alpha in (0.1, MoeServePolicy().accept.alpha):
        policy = MoeServePolicy(num_experts=32, top_k=4, num_layers=4, acceptance_alpha=alpha, warm_up=False)
        for outcome in outcomes:
            policy.observe(replace(stats([0], [0], 0.03), shadow=(outcome,), plain=True))
        p_first[alpha] = policy.accept.get("r0")[0]
    assert p_first[0.1] < 0.45 < 0.65 < p_first[MoeServePolicy().accept.alpha]


def test_a_request_whose_own_speculative_steps_ran_dearer_than_priced_stops_speculating():
    """At batch 1 a speculative step is its request's alone: where a request's own steps took longer than the model
    prices them (a code request's one-draft verifies on the CPU engine: 55-60 ms, priced 50.4), its later ones are
    priced at its own ratio, so it stops speculating while a request with the same acceptance and reuse that has
    no such history still does; a request whose steps ran cheaper is priced cheaper, never under a plain step."""
    from service.policy.moe_serve_observe import own_ratio

    policy = fresh_accepted_steps()
    for prefix in ("a", "b", "c"):
        for _ in range(3):
            step = replace(stats([0], [0], 0.025 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)
            policy.observe(replace(step, requests=(RequestStepStats(f"{prefix}0", 0, 0, 1.0),)))
    assert all(policy.decide(batch(1, max_k=3, prefix=p)).requests[0].k > 0 for p in ("a", "b", "c"))
    for _ in range(3):
        policy.observe(replace(stats([1], [1], 0.2, prefix="a", unique=(4,) * 4), draft_s=0.005))
        policy.observe(replace(stats([1], [1], 0.001, prefix="c", unique=(4,) * 4), draft_s=0.0))
    policy.accept = AcceptanceTracker(policy.k_max, prior=0.75)  # the same acceptance for all three
    assert own_ratio(policy, "a0", policy.model) > 1.2
    assert own_ratio(policy, "c0", policy.model) < 1.0
    assert policy.decide(batch(1, max_k=3, prefix="a")).requests[0].k == 0
    assert policy.decide(batch(1, max_k=3, prefix="b")).requests[0].k > 0
    assert policy.decide(batch(1, max_k=3, prefix="c")).requests[0].k > 0


def test_a_request_whose_accepted_drafts_ran_cheaper_than_priced_speculates_at_a_lower_acceptance():
    """Prose after code on the CPU engine (STANDALONE, moe-fine x48, batch 1): its three-draft steps took 37-45 ms
    where the bucket, calibrated on code, priced them at 56-68, and after one rejection it decoded plain at p ~ 0.7.
    A request whose own mostly-accepted steps ran cheaper than priced is priced at its own ratio and speculates at
    an acceptance where a request without that history does not; cheap steps whose drafts were rejected do not
    make a request's drafts cheaper."""
    from service.policy.moe_serve_observe import own_ratio

    policy = fresh_accepted_steps()
    for _ in range(3):
        policy.observe(replace(stats([2], [2], 0.035, prefix="a", unique=(5,) * 4), draft_s=0.01))
        policy.observe(replace(stats([2], [0], 0.035, prefix="c", unique=(5,) * 4), draft_s=0.01))
    policy.accept = AcceptanceTracker(policy.k_max, prior=0.75)  # the same acceptance for all three
    assert own_ratio(policy, "a0", policy.model) < 0.8
    assert own_ratio(policy, "c0", policy.model) == 1.0
    assert policy.decide(batch(1, max_k=3, prefix="a")).requests[0].k > 0
    assert policy.decide(batch(1, max_k=3, prefix="b")).requests[0].k == 0
    assert policy.decide(batch(1, max_k=3, prefix="c")).requests[0].k == 0


def test_own_cost_keeps_batch_one_speculative_steps_only():
    """Plain steps, batches of more than one request and the engine's first speculative step at batch 1 (one-time
    costs, StepTimeModel.warmed) teach nothing about one request's own cost; a later step at a verify size not seen
    before does."""
    policy = MoeServePolicy(num_experts=32, top_k=4, num_layers=4, refit_every=10_000, warm_up=False)
    policy.observe(replace(stats([0], [0], 0.2, prefix="a"), plain=True, draft_steps=0))
    policy.observe(stats([1, 1], [1, 1], 0.2, prefix="a"))
    policy.observe(stats([2], [2], 0.2, prefix="a"))  # the first speculative step at batch 1
    assert policy._own == {}
    policy.observe(stats([7], [7], 0.2, prefix="a"))  # 8 verify tokens: a size not seen before
    assert list(policy._own) == ["a0"] and len(policy._own["a0"]) == 1


@pytest.mark.parametrize(("tokens_left", "judged"), [(4, False), (64, True)])
def test_a_first_judgement_is_made_only_where_speculating_could_repay_it(tokens_left, judged):
    """A first judgement runs the draft model over the request's whole context, and the batch waits for it: it is
    made where speculating at the hoped-for acceptance could save more over the request's remaining tokens (a long
    prompt before a short answer: not). One that did not pay is weighed the same way when the back-off interval
    comes round, not by the rejudging bound (nothing was measured)."""
    policy = cpu_like(0.9)

    def view(left):
        base = judged_batch(policy.judge_after)
        return replace(base, requests=tuple(replace(r, tokens_left=left, draft_backlog=230) for r in base.requests))

    d = policy.decide(view(tokens_left))
    assert bool(d.judge) == judged and [r.k for r in d.requests] == [0, 0]
    if judged:
        return
    later = [policy.decide(emitted(view(64), step + 1)).judge for step in range(policy.judge_after)]
    assert later[:-1] == [frozenset()] * (policy.judge_after - 1) and later[-1] == {"r0", "r1"}
    ungated = cpu_like(0.9)
    ungated.judge_gate = False  # every request judged once due, whatever it costs
    assert ungated.decide(view(tokens_left)).judge == {"r0", "r1"}


def test_a_first_judgement_made_late_is_followed_by_the_first_interval_not_the_gates_back_off():
    """Each first gate that does not pay doubles the request's interval (judge_due); once its first judgement runs,
    its drafts are measured from then on, and it is judged again `judge_after` steps later, not after the interval
    the declined gates reached (a prose request at batch 1 on the CPU engine: gates declined at its 5th and 9th
    tokens, judged at its 17th, p = 0.69, then rested 16 steps, to its end)."""
    policy = cpu_like(0.9)
    base = judged_batch(policy.judge_after)
    short = replace(base, requests=tuple(replace(r, tokens_left=4, draft_backlog=230) for r in base.requests))
    judged = [step for step in range(policy.judge_after + 1) if policy.decide(emitted(short, step)).judge]
    assert not judged and policy._interval["r0"] == 2 * policy.judge_after  # declined twice: doubled
    long = replace(base, requests=tuple(replace(r, tokens_left=64) for r in base.requests))
    steps = range(policy.judge_after + 1, 3 * policy.judge_after + 1)
    judged = [step for step in steps if policy.decide(emitted(long, step)).judge]
    assert judged == [3 * policy.judge_after]  # at the doubled interval, where it now pays
    assert policy._interval["r0"] == policy.judge_after and policy._idle["r0"] == 0


@pytest.mark.parametrize(("burst", "rest"), [(1, 3), (4, 3), (3, 5)])
def test_first_judgements_that_do_not_pay_rest_until_the_interval_comes_round(burst, rest):
    """A group whose first judgements did not pay (and sent no scout) has nothing to weigh before its back-off
    interval (judge_after, 4) comes round: it rests until then, in whole plain bursts (BatchView.plain_burst), so the
    engine bursts through (awake, each step was a scheduler step of its own: STANDALONE arithmetic at batch 8, 11
    scheduler steps for a 31-token wave against 8 at K = 0)."""
    policy = cpu_like(0.9)
    base = replace(judged_batch(policy.judge_after), plain_burst=burst)
    view = replace(base, requests=tuple(replace(r, tokens_left=4, draft_backlog=230) for r in base.requests))
    d = policy.decide(view)
    assert not d.judge and d.rest_until == (policy.judge_after + 1 + rest,) * 2


@pytest.mark.parametrize("tokens_left", [8, 28, 64])
def test_the_hoped_gain_is_the_time_the_remaining_tokens_save(tokens_left):
    """At batch 1 the hoped-for gain of speculating is the request's remaining tokens times what a token costs less
    at the best depth (drafts accepted at `probe_hope`, the draft model caught up), a time the judgement or probe
    it pays for is weighed against. Counted per step instead (tokens_left / e), it came out e times too small, and
    on the CPU engine first judgements at batch 8 passed only in the first wave, before its plain steps were calibrated: prose never
    speculated there (1.12-1.14x of no speculation's TPOT, static K = 3 0.82x)."""
    from service.policy.moe_serve_probe import hoped_gain
    from service.policy.moe_serve_terms import chain

    policy = cpu_like(0.0)
    view = replace(
        judged_batch(4, rids=("r0",)), requests=(RequestView("r0", 4, draft_backlog=0, tokens_left=tokens_left),)
    )
    plain_tpot = policy._time([0], True, view, [[]], False)
    hoped = policy._priced_for(view.requests).hoped()
    best = max(
        plain_tpot
        - policy._time([d], True, view, [chain([policy.probe_hope] * d, d)], True, hoped)
        / (1.0 + sum(chain([policy.probe_hope] * d, d)))
        for d in range(1, policy.probe_k + 1)
    )
    assert best > 0, "speculation at the hoped-for acceptance must pay in this model"
    gain = hoped_gain(policy, [0], [0], [[0.0] * policy.k_max], [policy.probe_k], view)
    assert gain == pytest.approx(best * tokens_left, rel=1e-6)


def test_the_hoped_gain_prices_accepted_drafts_at_an_optimistic_bound_on_the_measured_reuse():
    """The gates hope: drafts accepted at `probe_hope`, and accepted drafts at Wilson's upper bound on the expert
    reuse the request measured over its plain steps, not at its mean. After three plain steps the mean is what a
    request's first tokens reused (prose on the CPU engine: 0.42-0.94, 0.83 by the 17th token for one at 0.42),
    and at the mean prose requests were declined until a later gate or to their end."""
    from service.policy.moe_serve_probe import _upper, hoped_gain
    from service.policy.moe_serve_terms import chain

    policy = fresh_accepted_steps()
    for _ in range(3):
        step = replace(stats([0], [0], 0.025 / 0.9, unique=(4,) * 4), plain=True, draft_steps=0)
        policy.observe(replace(step, requests=(RequestStepStats("r0", 0, 0, 0.4),)))
    view = replace(judged_batch(4, rids=("r0",)), requests=(RequestView("r0", 4, draft_backlog=0, tokens_left=28),))
    plain_tpot = policy._time([0], True, view, [[]], False)

    def gain_at(reuse: float) -> float:
        model = policy.model.reusing(1.0 - reuse).hoped()
        hoped = [chain([policy.probe_hope] * d, d) for d in range(1, policy.probe_k + 1)]
        return 28 * max(
            0.0,
            *(
                plain_tpot - policy._time([d], True, view, [c], True, model) / (1.0 + sum(c))
                for d, c in enumerate(hoped, 1)
            ),
        )

    bound = _upper(0.4, 3)
    assert 0.6 < bound < 0.7
    assert gain_at(0.4) < gain_at(bound), "the premise: accepted drafts that reuse more cost less"
    gain = hoped_gain(policy, [0], [0], [[0.0] * policy.k_max], [policy.probe_k], view)
    assert gain == pytest.approx(gain_at(bound), rel=1e-6)


def wave(tokens_so_far, backlogs, tokens_left=28):
    """A judging batch (STANDALONE-like) of requests r0.. whose draft caches lag `backlogs` tokens."""
    requests = tuple(
        RequestView(f"r{i}", tokens_so_far=tokens_so_far, draft_backlog=b, tokens_left=tokens_left)
        for i, b in enumerate(backlogs)
    )
    return BatchView(now=0.0, requests=requests, max_k=4, judging=True)


def test_a_first_gate_prices_an_uncalibrated_batch_sizes_speculative_steps_at_their_optimistic_end(monkeypatch):
    """The gates hope: where a batch size's speculative steps are not calibrated yet, they are priced at the
    bucket's plain ratio (StepTimeModel.scouting), as the allocation's cost scout prices them. At the batch-1 fit
    (here 1/0.6 of what the bucket's plain steps measured), a wave of 8 whose judgement the scouted prices repay
    is declined; on the CPU engine such gates of STANDALONE prose waves at batch 8 read no gain at all after code
    and arithmetic waves had calibrated the plain steps, and prose stayed plain there."""
    policy = cpu_like(0.9)
    fit = policy.model.step_time(8, 8, 0, 0)
    for _ in range(12):
        policy.observe(replace(stats([0] * 8, [0] * 8, 0.6 * fit, unique=(16,) * 4), plain=True, draft_steps=0))
    policy.model.refit()
    assert policy.model.step_time(8, 8, 0, 0) == pytest.approx(0.6 * fit, rel=0.05)
    assert not policy.model.calibrated(8)
    view, wave_of_8 = wave(policy.judge_after, [100] * 8, tokens_left=8), {f"r{i}" for i in range(8)}
    unscouted = cpu_like(0.9)
    unscouted.model = policy.model
    monkeypatch.setattr(type(policy.model), "scouting", lambda self: self)
    assert len(unscouted.decide(view).judge) < 8  # the premise: at the fit the wave's judgement does not pay
    monkeypatch.undo()
    assert policy.decide(view).judge == wave_of_8


@pytest.mark.parametrize(("scout_hits", "others_judged"), [((1,) * 8, True), ((0,) * 8, False)])
def test_a_scout_is_judged_alone_where_a_waves_first_judgements_do_not_pay_together(scout_hits, others_judged):
    """First judgements of a wave whose catch-up costs more than drafts hoped at `probe_hope` would save: the
    cheapest request (the shortest backlog) is judged alone, and the next step the others are weighed again at what
    it measured where that is higher (here, drafts that all matched: judged together) or at `probe_hope` (drafts
    that failed: not judged, and no second scout). On the CPU engine a wave of 8 STANDALONE prose requests at
    batch 8 was declined near break-even at 0.8 in two rounds of three, where its drafts then proved 0.9-0.99."""
    from service.policy.moe_serve_probe import judgement_cost, judgements_pay

    policy = cpu_like(0.9)
    backlogs = [1400] * 3 + [1300] + [1400] * 4
    view = wave(policy.judge_after, backlogs)
    group = list(range(8))
    zeros, caps = [0] * 8, [4] * 8
    probs = [[0.0] * policy.k_max] * 8
    assert not judgements_pay(policy, group, zeros, probs, caps, view)  # the premise: not at probe_hope
    assert judgements_pay(policy, group, zeros, probs, caps, view, [1.0] * policy.probe_k)  # at full acceptance
    assert judgement_cost(policy, [3], view) < judgement_cost(policy, group, view) / 4
    for t in range(1, policy.judge_after):
        assert not policy.decide(wave(t, backlogs)).judge
    d = policy.decide(view)
    assert d.judge == {"r3"} and {r.k for r in d.requests} == {0}
    shadow = tuple(ShadowOutcome("r3", 3, 1, hit) for hit in scout_hits)
    policy.observe(replace(stats([0] * 8, [0] * 8, 0.2), shadow=shadow, plain=True))
    after = wave(policy.judge_after + 1, [0 if i == 3 else b for i, b in enumerate(backlogs)])
    judged = policy.decide(after).judge
    assert judged == ({f"r{i}" for i in range(8) if i != 3} if others_judged else frozenset())
    if not others_judged:  # weighed again at the back-off interval, at probe_hope: declined, and no second scout
        later = [policy.decide(after).judge for _ in range(2 * policy.judge_after)]
        assert later == [frozenset()] * len(later)


def test_the_batch_hope_is_only_raised_by_what_requests_measured():
    """`batch_hope`: the hoped-for rate where nothing was measured or what was measured is lower; an optimistic
    bound on a request's measured acceptance where that is higher."""
    from service.policy.moe_serve_probe import batch_hope

    policy = cpu_like(0.9)
    view = wave(8, [100, 100])
    assert batch_hope(policy, view) == [policy.probe_hope] * policy.probe_k
    for _ in range(8):
        policy.accept.update("r0", 1, 0)
    assert batch_hope(policy, view) == [policy.probe_hope] * policy.probe_k
    for _ in range(8):
        policy.accept.update("r1", 3, 3)
    assert min(batch_hope(policy, view)) > policy.probe_hope


def ngram_steps(policy, outcomes, steps=24, burst=1):
    """Drive one request whose NGRAM draft (depth 4) is in hand as the engine does: a step in which it rests asks no
    policy but still judges its draft (Decision.rest_until), and a draft accepted to its end ends the rest; any other step
    looks its draft up and, at K = 0, judges it (`outcomes(step)` of 4 drafts accepted). Returns the steps at which
    the policy was asked and their K. `burst`: BatchView.plain_burst."""
    asked, until = [], 0
    for step in range(steps):
        if step < until:  # resting: a plain step, its draft judged
            hits = outcomes(step)
            shadow = (ShadowOutcome("n0", 4, min(hits + 1, 4), hits),)
            policy.observe(replace(stats([0], [0], 0.03, prefix="n"), plain=True, shadow=shadow))
            until = 0 if shadow[0].whole else until  # as the engine does (moe_sglang/step.py)
            continue
        view = replace(drafted(1, depth=4, prefix="n"), plain_burst=burst)
        d = policy.decide(replace(view, requests=(replace(view.requests[0], tokens_so_far=step, tokens_left=99),)))
        k = d.requests[0].k
        asked.append((step, k))
        until = d.rest_until[0] if d.rest_until else 0
        hits = outcomes(step)
        shadow = () if k else (ShadowOutcome("n0", 4, min(hits + 1, 4), hits),)
        policy.observe(replace(stats([k], [min(k, hits)], 0.03 + 0.01 * k, prefix="n"), shadow=shadow))
        until = 0 if shadow and shadow[0].whole else until  # a rest this step started ends here too
    return asked


@pytest.mark.parametrize(
    ("burst", "asked"), [(1, (0, 2, 4, 8, 16, 32, 49)), (4, (0, 4, 8, 16, 32, 48)), (32, (0, 17, 34, 51))]
)
def test_a_request_whose_drafts_are_rejected_rests_longer_each_time(burst, asked):
    """A request whose draft is in hand (NGRAM) and whose judged drafts are rejected rests between the steps that
    ask the policy, each rest with its starting step twice as many forwards as the one before, in whole plain bursts
    of the engine's (BatchView.plain_burst: a burst ends where a rest does, moe_sglang/plain_burst.py), at most
    max_rest (16) steps: bursts of 1: rests of 1, 3, 7, 15, 16 steps; of 4: 3, 7, 15 (4, 8, 16 forwards). Its first
    step starts a rest too, while its first draft is judged (judged_first: it may not speculate before), the shortest
    (a whole burst), which the back-off does not count: a first step awake was a scheduler step of one forward."""
    policy = cpu_like(0.5)
    assert ngram_steps(policy, lambda step: 0, steps=60, burst=burst) == [(s, 0) for s in asked]
    off = cpu_like(0.5)
    off.max_rest = 0
    assert ngram_steps(off, lambda step: 0) == [(s, 0) for s in range(24)]  # asked every step


def ngram_batch_steps(policy, outcomes, steps=24):
    """`ngram_steps` for a batch of two requests (n0, n1) decoding together: a step in which both rest is a plain
    burst step that asks no policy (moe_sglang/plain_burst.py); every request at K = 0 has its draft judged, resting
    or not, and a draft accepted to its end ends a rest; `outcomes(step, i)`: drafts of 4 that request i's judged draft
    matched. Returns the steps at which the policy was asked."""
    asked, until = [], [0, 0]

    def judged(step, ks):
        return tuple(
            ShadowOutcome(f"n{i}", 4, min(outcomes(step, i) + 1, 4), outcomes(step, i)) for i in (0, 1) if ks[i] == 0
        )

    for step in range(steps):
        if step < min(until):
            shadow = judged(step, [0, 0])
            policy.observe(replace(stats([0, 0], [0, 0], 0.06, prefix="n"), plain=True, shadow=shadow))
            until = [0 if o.whole else u for o, u in zip(shadow, until, strict=True)]  # as the engine does
            continue
        view = drafted(2, depth=4, prefix="n")
        view = replace(view, requests=tuple(replace(r, tokens_so_far=step, tokens_left=99) for r in view.requests))
        d = policy.decide(view)
        ks = [r.k for r in d.requests]
        asked.append(step)
        until = list(d.rest_until) if d.rest_until else [0, 0]
        shadow = judged(step, ks)
        policy.observe(replace(stats(ks, [0, 0], 0.06 + 0.01 * sum(ks), prefix="n"), shadow=shadow))
        woken = {o.request_id for o in shadow if o.whole}
        until = [0 if f"n{i}" in woken else u for i, u in enumerate(until)]
    return asked


def test_rests_in_a_batch_end_together():
    """Two requests whose judged drafts are rejected, the second from step 3 on (its first drafts matched): their
    back-offs start at different steps, and each new rest is lengthened to end with the other's, so that steps in
    which both rest (plain bursts, no policy) come; without it the staggered back-offs leave fewer."""

    def outcomes(step, i):
        return 4 if i == 1 and step < 3 else 0

    aligned = ngram_batch_steps(cpu_like(0.5), outcomes, steps=80)
    apart = cpu_like(0.5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("service.policy.moe_serve_probe.align_rests", lambda *a: None)
        apart_asked = ngram_batch_steps(apart, outcomes, steps=80)
    assert len(aligned) < len(apart_asked)
    later = [s for s in aligned if s >= 40]
    assert later and all(b - a == cpu_like(0.5).max_rest + 1 for a, b in zip(later, later[1:], strict=False))


def test_a_request_declining_its_drafts_rests_with_a_resting_batch():
    """A request with its draft in hand at K = 0 whose latest judged draft was accepted does not rest on its own;
    where every other request of its batch rests past this step, it rests with them until the first of their rests
    ends (a plain burst needs the whole batch at rest), and not where one of them is awake."""
    from service.policy.moe_serve_probe import rests

    policy = cpu_like(0.5)
    view = drafted(2, depth=4, prefix="n")
    t = 10
    view = replace(view, requests=tuple(replace(r, tokens_so_far=t, tokens_left=99) for r in view.requests))
    policy._hit["n1"] = True
    policy._shadowed |= {"n0", "n1"}  # judged before (a request's first draft is judged resting)
    policy._rest_until["n0"] = t + 1 + 3  # n0 rests this step and the next 3
    until = rests(policy, [1], [0, 0], [[0.9] * 4, [0.9] * 4], [0, 4], 4, view)
    assert until == (t + 4, t + 4)
    policy._rest_until = {"n0": t}  # n0's rest has ended: n1 stays awake
    assert rests(policy, [1], [0, 0], [[0.9] * 4, [0.9] * 4], [4, 4], 4, view) == ()


def test_an_accepted_draft_ends_the_back_off():
    """A text that turns predictable: the engine judges a resting request's draft in hand, and the first judgement
    that accepts a draft ends the rest (here the rest from step 8 to 15 ends at step 10's); it is then asked every
    step (its latest judged draft whole, its drafts could pay), and it speculates as soon as one asked every step."""
    policy = cpu_like(0.5)
    asked = ngram_steps(policy, lambda step: 0 if step < 10 else 4, steps=30)
    first = min(s for s, k in asked if k > 0)
    assert [s for s, _ in asked] == [0, 2, 4, 8, *range(11, 30)]
    off = cpu_like(0.5)
    off.max_rest = 0
    first_off = min(s for s, k in ngram_steps(off, lambda step: 0 if step < 10 else 4, steps=30) if k > 0)
    assert first <= first_off


def test_a_request_whose_drafts_are_accepted_never_rests():
    policy = cpu_like(0.5)
    asked = ngram_steps(policy, lambda step: 4)
    assert [s for s, _ in asked] == list(range(24)) and all(k > 0 for _, k in asked[1:])
    assert not policy._rest_until


def test_a_judged_request_rests_until_its_next_judgement_is_due():
    """A request the engine judges (STANDALONE) rests before its first judgement (it cannot speculate before it,
    judged_first) and, where its drafts could not pay at an optimistic bound, until its next judgement is due: the
    judgement schedule is the same as when it is asked every step."""
    policy = cpu_like(0.9)
    d = policy.decide(judged_batch(1))
    assert d.rest_until == (policy.judge_after, policy.judge_after)
    policy, view = judged_once({"r0": (0, 0, 0, 0), "r1": (1, 0, 0, 0)})
    d = policy.decide(view)
    t = view.requests[0].tokens_so_far
    assert d.rest_until == (t + 3, t + 3)  # judged again after judge_after = 4 steps: steps t+1, t+2 rest
    assert [r.k for r in policy.decide(emitted(view, 1)).requests] == [0, 0] and not policy.decide(
        emitted(view, 2)
    ).judge


@pytest.mark.parametrize(("rejudge_after", "judged_at"), [(2, 7), (4, 9)])
def test_a_request_that_stops_speculating_is_judged_again_at_its_second_plain_step(rejudge_after, judged_at):
    """A judged request (STANDALONE) whose drafts began to be rejected falls to K = 0 at the knife edge (in the CPU
    engine's prose cells at batch 1, one rejected first draft took a request's own p from ~0.95 to ~0.66-0.68, where
    J at K = 3 and K = 0 differed by under the cost model's margin), and nothing about its drafts is measured until
    its next judgement: after `judge_after` = 4 steps such requests rested 4 plain steps each time, then speculated
    again on the judgement's first outcome. It is judged again at its second step at K = 0 (`rejudge_after`), the
    first whose judgement measures something: the first one emits the token the judgement's root needs (the target's
    correction of the rejected draft is the draft cache's newest root)."""
    policy, view = judged_once({"r0": (1,) * 8, "r1": (0, 0, 0, 0)})
    policy.rejudge_after = rejudge_after
    view = replace(view, requests=view.requests[:1])
    ks, judged, rejecting = [], [], True
    for step in range(judged_at + 2):
        d = policy.decide(emitted(view, step))
        k = d.requests[0].k
        rejecting = rejecting and not (step > 0 and k == 0)  # its drafts are rejected until it stops speculating
        ks.append(k)
        judged += [step] * bool(d.judge)
        if k > 0:
            step_s = (0.0294 + (0.0149 if rejecting else 0.0036) * k) / 0.9
            spec = stats([k], [0 if rejecting else k], step_s, unique=(4 + 2 * k * rejecting,) * 4)
            policy.observe(replace(spec, draft_s=0.0055 * k))
        else:
            shadow = (ShadowOutcome("r0", 4, 1, 1),) if d.judge else ()
            policy.observe(replace(stats([0], [0], 0.0294 / 0.9), shadow=shadow, plain=True))
    stopped = ks.index(0)
    assert stopped > 1 and ks[stopped : judged_at + 1] == [0] * (judged_at + 1 - stopped)
    assert judged == [judged_at] and stopped + rejudge_after - 1 == judged_at
    assert ks[judged_at + 1] > 0  # the judgement's accepted draft brings it back


def test_state_of_requests_that_left_is_forgotten():
    """Every per-request map of the policy is listed in PER_REQUEST (`_probing` is the step's own) and loses the
    requests that left the batch once the tracker holds many more than the batch."""
    from service.policy.moe_serve import PER_REQUEST

    policy = cpu_like(0.5)
    maps = {k for k, v in vars(policy).items() if k.startswith("_") and isinstance(v, dict | set)}
    assert maps - {"_probing"} == set(PER_REQUEST)
    for i in range(40):
        policy.accept.update(f"gone{i}", 1, 1)
    for name in PER_REQUEST:
        kept = getattr(policy, name)
        kept.add("gone0") if isinstance(kept, set) else kept.__setitem__("gone0", 1)
    policy.decide(batch(2))
    assert all("gone0" not in getattr(policy, name) for name in PER_REQUEST)


def in_hand(view: BatchView, depth: int) -> BatchView:
    """`view` with every request's draft in hand (NGRAM), `depth` deep."""
    return replace(view, requests=tuple(replace(r, draft_depth=depth) for r in view.requests))


@pytest.mark.parametrize("drafts_in_hand", [True, False])
def test_every_depth_is_priced(monkeypatch, drafts_in_hand):
    """J need not fall steadily with the draft depth (a verify's first tokens wake the most fresh experts): depths 1
    and 2 above K = 0 and depth 3 below it, the allocation finds depth 3 whether every draft is in hand (NGRAM) or
    drafting costs (STANDALONE; a search that stopped after two depths without improvement kept STANDALONE prose at
    batch 8 plain on the CPU engine, bench/results/prose-b8-s51)."""
    from service.policy import moe_serve_allocate

    policy = trained(2, 0.7, k_max=4)
    view = in_hand(batch(2), 4) if drafts_in_hand else batch(2)
    probs, caps = [[0.7] * 4] * 2, [4, 4]
    plain = policy._objective([0, 0], moe_serve_allocate.chains_of(probs, caps), float("inf"), True, view)
    factor = {1: 1.1, 2: 1.2, 3: 0.8, 4: 0.9}
    monkeypatch.setattr(
        moe_serve_allocate,
        "eliminate",
        lambda pricer, chains, ks, *rest: (ks, (plain[0], plain[1] * factor[max(ks)])),
    )
    chosen = policy.allocate(probs, caps, float("inf"), drafting=True, layout=view)
    assert chosen == [3, 3]


def test_an_uncalibrated_bucket_scouts_its_speculative_cost(monkeypatch):
    """Where the allocation keeps a step plain and the batch size's speculative steps are not calibrated, it is
    priced again with them at the bucket's plain ratio (StepTimeModel.scouting), drafts in hand (NGRAM) or not
    (STANDALONE, whose prose at batch 8 on the CPU engine stayed plain on prices at the batch-1 fit, 1.3-1.6x what
    such steps took: bench/results/prose-b8-s51); once calibrated, not."""
    policy = trained(8, 0.7, judged_first=False)
    seen = []

    def allocate(probs, caps, cap_s, drafting, layout=None, model=None):
        seen.append(model is not None and model._scout)
        return [2] * len(caps) if seen[-1] else [0] * len(caps)

    monkeypatch.setattr(policy, "allocate", allocate)
    view = in_hand(batch(8), 4)
    assert [r.k for r in policy.decide(view).requests] == [2] * 8 and seen == [False, True]
    seen.clear()
    assert [r.k for r in policy.decide(batch(8)).requests] == [2] * 8 and seen == [False, True]  # drafting costs
    seen.clear()
    monkeypatch.setattr(policy.model, "calibrated", lambda requests: True)
    assert [r.k for r in policy.decide(view).requests] == [0] * 8 and seen == [False]


def test_a_scout_prices_uncalibrated_speculative_steps_at_the_plain_ratio():
    from types import SimpleNamespace

    from service.policy.expert_routing import batch_bucket

    policy = trained(8, 0.7)
    model = policy.model
    model._plain_calibration[batch_bucket(8)] = SimpleNamespace(ratio=0.6, measured=True)
    assert not model.calibrated(8)
    assert model.pricer(8).scale(40, 4, None) == 1.0  # the fit alone: a plain ratio below 1 says nothing of a verify's
    assert model.scouting().pricer(8).scale(40, 4, None) == pytest.approx(0.6)
    assert model.scouting().pricer(8).scale(8, 0, None) == model.pricer(8).scale(8, 0, None) == pytest.approx(0.6)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "rejected"])
def test_a_judgement_accepted_to_its_end_resets_the_judging_back_off(whole):
    """moe_serve_observe.judged_back_off: a judged request whose judgement was accepted to its end is judged again
    `judge_after` steps on (the back-off doubles for drafts that keep failing); one rejected waits the doubled
    interval (test_a_request_is_judged_again_only_where_its_drafts_could_pay)."""
    policy, view = judged_once({"r0": (0, 0, 0, 0), "r1": (1, 1, 0, 0)})
    due, ks = [], []
    for step in range(12):
        d = policy.decide(emitted(view, step))
        due += [step] * ("r1" in d.judge)
        ks.append(d.requests[1].k)
        if step == 3:  # r1's second judgement: a chain of 2 matched to its end, or its first token rejected
            judged = ShadowOutcome("r1", 4, 2, 2) if whole else ShadowOutcome("r1", 4, 1, 0)
            policy.observe(replace(stats([0, 0], [0, 0], 0.03), shadow=(judged,), plain=True))
    assert due == ([3, 7] if whole else [3])
    assert policy._interval["r1"] == (2 if whole else 4) * policy.judge_after and not any(ks)


@pytest.mark.parametrize(("tokens", "chains"), [(0, []), (3, [3]), (4, [4]), (9, [4, 4]), (11, [4, 4, 1])])
def test_acceptance_if_matched_reads_as_the_judged_chains_would_leave_it(tokens, chains):
    """AcceptanceTracker.if_matched: the estimates after a judgement that found `tokens` emitted tokens all matched,
    replayed as chains of 4 (each next one after the previous one's bonus token), without changing the tracker."""
    tracker = AcceptanceTracker(4, prior=0.9, alpha=0.3)
    tracker.update("r", 1, 0)
    tracker.update("r", 1, 0)
    before = list(tracker.get("r"))
    hoped = tracker.if_matched("r", tokens, 4)
    assert tracker.get("r") == before
    for run in chains:
        tracker.update("r", run, run)
    assert hoped == pytest.approx(tracker.get("r"))


@pytest.mark.parametrize("weight", [0.0, 0.5, 2.0])
def test_the_prior_counts_as_prior_weight_outcomes_in_a_requests_own_estimate(weight):
    """AcceptanceTracker's prior_weight: a new request's first outcome moves its estimate by 1 / (1 + weight) of the
    way from the batch-wide prior; moe-serve passes `acceptance_prior_weight` to its tracker."""
    tracker = AcceptanceTracker(4, prior=0.6, alpha=0.1, prior_weight=weight)
    tracker.update("r", 1, 0)
    assert tracker.get("r")[0] == pytest.approx(0.6 * weight / (1 + weight))
    assert MoeServePolicy(acceptance_prior_weight=weight).accept.prior_weight == weight
    with pytest.raises(ValueError, match="prior_weight"):
        AcceptanceTracker(4, prior_weight=-1.0)


@pytest.mark.parametrize(("weight", "judged_at"), [(0.5, 11), (2.0, 3)])
def test_how_soon_a_request_whose_first_two_judged_tokens_were_rejected_is_judged_again(weight, judged_at):
    """A request whose first judgement found its first two output tokens rejected (prose on the CPU engine,
    STANDALONE, moe-fine x48, batch 1: a text's first output tokens are its draft's hardest) under a batch-wide
    prior of 0.7: with the prior counting as half an outcome its estimate falls to 0.14 and the judgement due at
    its next due step cannot pay, even were the tokens since all matched; the next one came 8 steps later (in the
    engine's step log such requests were judged again 14 steps on, then found their drafts accepted whole). At 2
    outcomes (moe-serve's default, acceptance_prior_weight) it reads 0.33 and is judged at the next due step."""
    policy = cpu_like(0.7)
    policy.accept = AcceptanceTracker(policy.k_max, prior=0.7, alpha=0.3, prior_weight=weight)
    for t in range(1, policy.judge_after + 1):
        policy.decide(judged_batch(t, ("r0",)))
    shadow = (ShadowOutcome("r0", 4, 1, 0),) * 2
    policy.observe(replace(stats([0], [0], 0.03), shadow=shadow, plain=True))
    view = judged_batch(policy.judge_after + 1, ("r0",))
    due = []
    for step in range(12):
        v = emitted(view, step)
        d = policy.decide(replace(v, requests=tuple(replace(r, draft_backlog=step + 1) for r in v.requests)))
        due += [step] * bool(d.judge)
    assert due[:1] == [judged_at]


@pytest.mark.parametrize(("backlog", "judged_again"), [(0, []), (8, []), (16, [3, 11])])
def test_a_request_that_emitted_tokens_since_its_judgement_is_judged_again_where_they_could_change_it(
    backlog, judged_again
):
    """moe_serve_probe.rejudging_could_pay: a judgement due again is weighed at the higher of the bound on what the
    request measured and its acceptance were every token since its last judgement (those its draft cache lacks,
    RequestView.draft_backlog) matched. The bound alone does not grow while the request waits: a request whose first
    judgement found none of 4 matched (a text's first output tokens are its hardest) was never judged again."""
    policy = cpu_like(0.9)
    for t in range(1, policy.judge_after + 1):
        policy.decide(judged_batch(t, ("r0",)))
    shadow = tuple(ShadowOutcome("r0", 4, 1, 0) for _ in range(4))
    policy.observe(replace(stats([0], [0], 0.03), shadow=shadow, plain=True))
    view = judged_batch(policy.judge_after + 1, ("r0",))
    due = []
    for step in range(12):
        v = emitted(view, step)
        d = policy.decide(replace(v, requests=tuple(replace(r, draft_backlog=backlog) for r in v.requests)))
        due += [step] * bool(d.judge)
    assert due == judged_again
