import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.policy.cost_model import StepTimeModel
from service.policy.expert_routing import SplitAffinity
from service.policy.moesd import expected_experts, routing_events, saturation_tokens, speedup, target_efficiency
from service.policy.step_coefficients import MoeShape, StepCoefficients


@pytest.mark.parametrize(
    ("tokens", "experts", "top_k", "expected"),
    [
        (0, 64, 8, 0.0),
        (1, 64, 8, 8.0),  # one token: exactly its k experts
        (2, 8, 2, 8 * (1 - 0.75**2)),  # Mixtral-like: 3.5 experts for 2 tokens
        (63, 64, 8, 64 * (1 - (56 / 64) ** 63)),  # OLMoE-like, 63 draft tokens: ~64 experts
        (10, 4, 4, 4.0),  # dense routing: everything always
    ],
)
def test_expected_experts_table(tokens, experts, top_k, expected):
    assert expected_experts(tokens, experts, top_k) == pytest.approx(expected)


@given(st.integers(1, 256), st.integers(1, 128), st.data())
def test_expected_experts_is_monotone_and_bounded(experts, tokens, data):
    k = data.draw(st.integers(1, experts))
    a, b = expected_experts(tokens, experts, k), expected_experts(tokens + 1, experts, k)
    assert k - 1e-9 <= a <= b <= experts + 1e-9


@given(st.integers(2, 256), st.floats(1, 500), st.data())
def test_routing_events_inverts_expected_experts(experts, events, data):
    k = data.draw(st.integers(1, experts - 1))
    n = expected_experts(events, experts, k)
    if n < experts * (1 - 1e-6):
        assert routing_events(n, experts, k) == pytest.approx(events, rel=1e-5)


@pytest.mark.parametrize(
    ("experts", "top_k", "tau", "expected"), [(8, 2, 0.95, 11), (64, 8, 0.95, 23), (64, 64, 0.95, 1)]
)
def test_saturation_tokens_table(experts, top_k, tau, expected):
    t = saturation_tokens(experts, top_k, tau)
    assert t == expected
    if top_k < experts:
        assert expected_experts(t, experts, top_k) >= tau * experts > expected_experts(t - 1, experts, top_k)


def test_target_efficiency_and_speedup():
    assert target_efficiency(0.01, 0.02) == 0.5
    # all 4 tokens accepted, free drafting, verify as cheap as decode: 4x
    assert speedup(sigma=1.0, gamma=3, t_draft=0.0, t_reject=0.0, t_target_1=0.01, t_target_gamma=0.01) == 4.0
    # half accepted, verify twice as slow, drafting 10 % of decode per token
    assert speedup(0.5, 3, 0.001, 0.0, 0.01, 0.02) == pytest.approx(0.5 * 4 / (0.3 + 2.0))
    with pytest.raises(ValueError):
        target_efficiency(0.0, 1.0)


TRUTH = StepCoefficients(
    verify_fixed=2e-3,
    per_token=3e-5,
    per_expert=4.5e-5,
    per_draft_step=4e-4,
    per_draft_token=1e-5,
    other=5e-4,
    verify_extra=1e-3,
    plain_other=2e-4,
    per_backlog_token=2e-5,
)


def synthetic_steps(model, truth, affinity, rng, n, noise=0.0):
    shape = model.shape
    for _ in range(n):
        batch = rng.randint(1, 16)
        plain = rng.random() < 0.3  # a step where nobody speculated: a plain decode
        ks = [0 if plain else rng.randint(0, 5) for _ in range(batch)]
        plain = sum(ks) == 0
        tokens = batch + sum(ks)
        fresh = batch + sum(ks) * (1 - affinity)
        unique = [round(expected_experts(fresh, shape.num_experts, shape.top_k))] * shape.num_layers
        verify = truth.verify_fixed + truth.per_token * tokens + truth.per_expert * sum(unique)
        verify += 0.0 if plain else truth.verify_extra * batch
        # now and then a request drafts after a pause: the draft model first catches up over its context
        backlog = 0 if plain or rng.random() < 0.7 else rng.randint(1, 300)
        draft = truth.per_draft_step * max(ks) + truth.per_draft_token * sum(ks) + truth.per_backlog_token * backlog
        jitter = 1 + rng.gauss(0, noise)
        other = truth.plain_other if plain else truth.other
        model.add(tokens, batch, unique, max(ks), sum(ks), verify * jitter, draft * jitter, other, plain, backlog)


@pytest.mark.parametrize(("noise", "rel"), [(0.0, 0.02), (0.02, 0.15)])
def test_fit_recovers_known_coefficients(noise, rel):
    prior = StepCoefficients(1e-2, 1e-4, 1e-5, 1e-3, 1e-4, 1e-3)  # deliberately wrong
    model = StepTimeModel(MoeShape(64, 8, 4), prior, window=400, ridge=1e-6)
    synthetic_steps(model, TRUTH, affinity=0.4, rng=random.Random(3), n=400, noise=noise)
    model.refit()
    names = ("verify_fixed", "verify_extra", "per_token", "per_expert", "per_draft_step", "per_draft_token")
    names += ("per_backlog_token",)
    for name in (*names, "other", "plain_other"):
        assert getattr(model.coef, name) == pytest.approx(getattr(TRUTH, name), rel=rel), name
    for batch in (1, 2, 4, 8):  # (the few steps at 16, near saturation, pin it loosely: see the next test)
        assert model.routing(batch).affinity == pytest.approx(0.4, abs=0.05), batch


def test_affinity_is_learnt_from_the_first_steps_with_drafts():
    """A running mean at first: a request whose 4 verify tokens hit hardly more experts than one (what the CPU
    engine's steps showed) is priced so after a couple of steps, not after the ~20 an EMA from 0 would need."""
    model = StepTimeModel(MoeShape(32, 4, 4), TRUTH)
    for _ in range(2):
        model.add(4, 1, [5, 5, 5, 5], 3, 3, verify_s=0.05, draft_s=0.01, other_s=0.001)
    assert model.routing(1).affinity > 0.85
    assert model.experts(4, 1) < 4 * 6


def test_catch_up_tokens_are_priced_only_where_drafting_runs():
    model = StepTimeModel(MoeShape(64, 8, 4), TRUTH)
    drafted = model.step_time(tokens=8, requests=2, draft_steps=3, draft_tokens=6)
    assert model.step_time(8, 2, 3, 6, backlog_tokens=100) == pytest.approx(drafted + 100 * 2e-5)
    assert model.step_time(2, 2, 0, 0, backlog_tokens=100) == model.step_time(2, 2, 0, 0)


def test_predicted_step_time_uses_fitted_coefficients_and_budget():
    model = StepTimeModel(MoeShape(64, 8, 4), TRUTH)
    t = model.step_time(tokens=16, requests=8, draft_steps=1, draft_tokens=8)
    experts = 4 * expected_experts(16, 64, 8)
    assert t == pytest.approx(2e-3 + 1e-3 * 8 + 3e-5 * 16 + 4.5e-5 * experts + 4e-4 + 8e-5 + 5e-4)  # extra per request
    plain = model.step_time(tokens=8, requests=8, draft_steps=0, draft_tokens=0)
    assert plain == pytest.approx(2e-3 + 3e-5 * 8 + 4.5e-5 * 4 * expected_experts(8, 64, 8) + 2e-4)
    assert model.experts(16, 8, budget=20) == 4 * 20  # the budget caps each layer
    assert math.isclose(model.experts(8, 8), 4 * expected_experts(8, 64, 8))


def test_bad_shape_is_rejected():
    with pytest.raises(ValueError):
        MoeShape(8, 9, 1)


def test_fixed_drafting_counts_as_step_overhead():
    """A drafter that does the same work whatever K is (draft_steps = 0): no draft coefficients, its time is `other`
    (the linear fit alone: calibration would scale the step as a whole)."""
    model = StepTimeModel(MoeShape(64, 8, 4), TRUTH, calibrate=False)
    for batch in (1, 2, 4, 8) * 10:
        model.add(batch * 4, batch, [], 0, 3 * batch, verify_s=0.01, draft_s=0.003, other_s=0.001)
    model.refit()
    assert model.coef.per_draft_step == 0.0 and model.coef.per_draft_token == 0.0
    assert model.coef.other == pytest.approx(0.004)
    assert model.step_time(8, 2, draft_steps=3, draft_tokens=6) == pytest.approx(model.verify_time(8, 2) + 0.004)


def test_drafting_not_yet_fitted_keeps_the_prior_at_the_machines_scale():
    """The engine's first drafting step is not fitted (first step at its size) and the rest were plain: drafting
    is not free (the fit used to set every draft coefficient to 0 here, as for a drafter whose work is fixed); the
    prior's draft costs scaled by what the plain steps measured against the prior's prediction for them."""
    prior = StepCoefficients(4e-3, 5e-5, 5e-5, 1e-3, 2e-5, 5e-4, per_backlog_token=2e-5)
    model = StepTimeModel(MoeShape(32, 4, 4), prior)
    model.add(24, 8, [12] * 4, 2, 16, verify_s=0.29, draft_s=0.19, other_s=0.03, backlog_tokens=1024)
    plain = 4e-3 + 5e-5 * 8 + 5e-5 * 4 * 10
    for _ in range(15):
        model.add(8, 8, [10] * 4, 0, 0, verify_s=10 * plain, draft_s=0.0, other_s=0.001, plain=True)
    model.refit()
    assert model.coef.per_draft_step == pytest.approx(10 * 1e-3)
    assert model.coef.per_draft_token == pytest.approx(10 * 2e-5)
    assert model.coef.per_backlog_token == pytest.approx(10 * 2e-5)


def test_judgements_are_fitted_apart_from_draft_steps():
    """A judgement (one draft forward over a context, StepStats.judge_s) is priced by its own fit: counted as a
    draft step with its catch-up, the fixed cost of a forward over ~130 rows made every draft step of a chain look
    ~3x dearer than it is (3.5 ms fitted where a one-row draft forward took ~1 ms on the CPU engine). Before any
    judgement is measured it is priced as a draft step with its catch-up."""
    truth = {"per_draft_step": 1e-3, "judge_fixed": 3e-3, "per_judged_token": 4e-5}
    model = StepTimeModel(
        MoeShape(32, 4, 4), StepCoefficients(4e-3, 5e-5, 5e-5, 1e-3, 0.0, 5e-4, per_backlog_token=2e-5), ridge=1e-6
    )
    assert model.judgement_time(100) == pytest.approx(model.coef.per_draft_step + 100 * model.coef.per_backlog_token)
    for i in range(40):
        depth = 1 + i % 4
        if i % 2:  # a plain step with a judgement of a context of 100-139 tokens, nothing drafted
            judged = 100 + i
            judge_s = truth["judge_fixed"] + truth["per_judged_token"] * judged
            model.add(1, 1, [4] * 4, 0, 0, verify_s=0.006, draft_s=0.0, other_s=0.001, plain=True,
                      judge_s=judge_s, judge_tokens=judged)  # fmt: skip
        else:  # a speculative step of a chain of `depth` drafts, two tokens to catch up
            draft_s = truth["per_draft_step"] * depth + 2e-5 * 2
            model.add(depth + 1, 1, [8] * 4, depth, depth, verify_s=0.01, draft_s=draft_s, other_s=0.001,
                      backlog_tokens=2)  # fmt: skip
    model.refit()
    assert model.coef.per_draft_step == pytest.approx(truth["per_draft_step"], rel=0.05)
    assert model.judgement_time(130) == pytest.approx(truth["judge_fixed"] + 130 * truth["per_judged_token"], rel=0.05)


def test_a_plain_step_is_priced_without_the_verify_path():
    """Steps where nobody speculated ran a plain decode: the model learns what the verify path adds over it (the
    linear fit alone: these steps' expert counts do not grow with tokens, which calibration would correct for)."""
    model = StepTimeModel(
        MoeShape(64, 8, 4), StepCoefficients(1e-3, 1e-5, 1e-5, 0.0, 0.0, 1e-3), ridge=1e-6, calibrate=False
    )
    rng = random.Random(0)
    for _ in range(60):
        batch = rng.randint(1, 8)
        model.add(batch, batch, [8] * 4, 0, 0, verify_s=0.004, draft_s=0.0, other_s=0.0005, plain=True)
        model.add(3 * batch, batch, [8] * 4, 0, 0, verify_s=0.004 + 0.0005 * batch, draft_s=0.0, other_s=0.002)
    model.refit()
    assert model.coef.verify_extra == pytest.approx(0.0005, rel=0.05)  # per request
    assert model.coef.plain_other == pytest.approx(0.0005) and model.coef.other == pytest.approx(0.002)
    assert model.step_time(4, 4, 0, 0) < model.step_time(5, 4, 1, 1) - 0.003


def test_the_time_outside_the_forward_is_priced_by_batch_size():
    """Bookkeeping outside the forward grows with the batch (CPU engine: a verify step's ~2 ms at batch 1, ~4 ms at
    batch 8). Each batch-size bucket prices its own measurement, a bucket not measured the nearest one that is;
    one average over all sizes priced batch-1 verifies at batch 8's."""
    model = StepTimeModel(MoeShape(32, 4, 4), StepCoefficients(1e-3, 1e-5, 1e-5, 0.0, 0.0, 1e-3), ridge=1e-6)
    for _ in range(30):  # mostly batch 8 (a wave), a few batch-1 verifies
        model.add(24, 8, [20] * 4, 0, 0, verify_s=0.1, draft_s=0.0, other_s=0.004)
        model.add(8, 8, [20] * 4, 0, 0, verify_s=0.08, draft_s=0.0, other_s=0.001, plain=True)
    for _ in range(3):
        model.add(2, 1, [6] * 4, 0, 0, verify_s=0.03, draft_s=0.0, other_s=0.002)
    model.refit()
    assert model.other_time(plain=False, requests=1) == pytest.approx(0.002)
    assert model.other_time(plain=False, requests=8) == pytest.approx(0.004)
    assert model.other_time(plain=False, requests=16) == pytest.approx(0.004)  # nearest measured: batch 8's
    assert model.other_time(plain=True, requests=1) == pytest.approx(0.001)  # plain steps measured at batch 8 only
    without_split = model.verify_time(2, 1) + 0.002
    assert model.step_time(2, 1, 0, 0) == pytest.approx(without_split)


def test_split_affinity_recovers_what_accepted_and_rejected_drafts_route_to():
    split = SplitAffinity(accepted_prior=0.0)
    assert split.fresh_per_draft() is None  # nothing seen
    rng = random.Random(5)
    for _ in range(40):
        a, r = rng.randint(0, 4), rng.randint(0, 4)
        split.add(a, r, 0.1 * a + 0.7 * r)
    u_acc, u_rej = split.fresh_per_draft()
    assert u_acc == pytest.approx(0.1) and u_rej == pytest.approx(0.7)


def test_split_affinity_needs_steps_that_tell_the_two_apart():
    split = SplitAffinity(accepted_prior=0.0)
    for _ in range(10):
        split.add(2, 2, 1.0)  # always half accepted: any u_acc + u_rej = 0.5 fits
    assert split.fresh_per_draft() is None
    split.add(0, 3, 3.0)
    assert split.fresh_per_draft() is not None


def test_few_accepted_drafts_do_not_price_accepted_drafts_as_fresh_experts():
    """Batch 1 after code and arithmetic on the CPU engine (STANDALONE): probes' drafts mostly rejected, a few
    accepted in steps that also rejected, noisy. Unpinned, u_acc came out at 1.0; the prior that an accepted draft
    is the target's own token holds it near 0 until enough accepted drafts say otherwise."""
    rows = [(0, 3, 2.9), (0, 3, 2.6), (1, 2, 2.9), (0, 3, 2.8), (1, 2, 2.8), (0, 3, 2.7)]
    unpinned, pinned = SplitAffinity(accepted_prior=0.0), SplitAffinity()
    for row in rows:
        unpinned.add(*row)
        pinned.add(*row)
    assert unpinned.fresh_per_draft()[0] > 0.8
    u_acc, u_rej = pinned.fresh_per_draft()
    assert u_acc < 0.2 and u_rej > 0.9
    for _ in range(40):  # many steps whose accepted drafts did hit fresh experts: the data wins
        pinned.add(3, 0, 2.4)
        pinned.add(0, 3, 2.7)
    assert pinned.fresh_per_draft()[0] == pytest.approx(0.8, abs=0.05)
    with pytest.raises(ValueError):
        SplitAffinity(accepted_prior=-1.0)


def test_split_affinity_stays_in_range():
    split = SplitAffinity(min_steps=2)
    split.add(3, 0, -1.0)  # fewer routings than requests (measurement noise): no negative share
    split.add(0, 3, 9.0)  # more than one fresh routing per draft: capped at 1
    u_acc, u_rej = split.fresh_per_draft()
    assert 0.0 <= u_acc <= 1.0 and 0.0 <= u_rej <= 1.0
    assert u_acc == 0.0 and u_rej == 1.0


def test_accepted_drafts_are_priced_by_their_own_routing():
    """What the CPU engine measured (moe-fine x48, STANDALONE, batch 1, 4-token verifies): drafts that were all
    accepted hit about one token's experts (16 over 4 layers), rejected ones ~40. Once both kinds were seen, a verify
    expected to accept most of its drafts is priced cheaper than one expected to reject them, and the single
    affinity (the mix of both) still answers where no expectation is given."""
    model = StepTimeModel(MoeShape(32, 4, 4), TRUTH)
    for i in range(12):
        good = i % 3 == 0
        model.add(4, 1, [4] * 4 if good else [10] * 4, 3, 3, 0.05, 0.01, 0.001, accepted=3 if good else 0)
    likely, unlikely = model.experts(4, 1, accepted=2.7), model.experts(4, 1, accepted=0.3)
    assert likely < 4 * 5.5 < 4 * 9 < unlikely
    assert likely < model.experts(4, 1) < unlikely
    assert model.verify_time(4, 1, accepted=2.7) < model.verify_time(4, 1) < model.verify_time(4, 1, accepted=0.3)


def test_the_hoped_for_model_prices_accepted_drafts_at_the_targets_routing_until_measured():
    model = StepTimeModel(MoeShape(32, 4, 4), TRUTH)
    for _ in range(3):
        model.add(4, 1, [10] * 4, 3, 3, 0.05, 0.01, 0.001, accepted=0)  # rejected drafts only: no split yet
    assert model.routing(1).split.fresh_per_draft() is None
    hoped = model.hoped()
    assert hoped.experts(4, 1, accepted=3) == pytest.approx(4 * 4)  # one token's experts per layer
    assert hoped.experts(4, 1, accepted=0) == pytest.approx(model.experts(4, 1, accepted=0))
    assert model.experts(4, 1, accepted=3) > 4 * 8  # the fitted model itself is not optimistic
    for _ in range(3):
        model.add(4, 1, [6] * 4, 3, 3, 0.05, 0.01, 0.001, accepted=3)
    assert model.routing(1).split.fresh_per_draft() is not None
    for accepted in (0, 1.5, 3):  # measured: nothing left to hope
        assert model.hoped().experts(4, 1, accepted=accepted) == model.experts(4, 1, accepted=accepted)


def test_routing_learnt_at_a_large_batch_does_not_price_a_small_one():
    """The CPU engine's NGRAM steps at batch 8 (moe-fine x48: 32 experts, top-4, 4 layers) hit 21 experts per layer
    at K = 0 and hardly more with drafts: inverted through uniform routing, that reads as drafts reusing experts.
    A batch-1 request verifying a draft that is rejected loads a fresh token's experts (>= +58 % step time);
    priced with batch 8's split it looked ~20 % dearer. Batch 1 borrows nothing from larger batches; a larger
    batch not yet measured borrows from the nearest smaller one."""
    model = StepTimeModel(MoeShape(32, 4, 4), TRUTH)
    for k in (1, 2, 3) * 4:
        model.add(8 + 8 * k, 8, [22] * 4, 0, 8 * k, 0.11, 0.0, 0.002, accepted=4 * k)
        model.add(8 + 8 * k, 8, [23] * 4, 0, 8 * k, 0.11, 0.0, 0.002, accepted=2 * k)
    assert model.routing(8).affinity > 0.8
    assert model.routing(1).steps == 0 and model.routing(1).affinity == 0.0  # the prior's
    assert model.experts(2, 1, accepted=0) == pytest.approx(4 * expected_experts(2, 32, 4))
    assert model.experts(2, 1) > 1.7 * model.experts(1, 1)
    for _ in range(3):
        model.add(2, 1, [6] * 4, 0, 1, 0.03, 0.0, 0.002)  # batch 1 measured: half of a draft's experts are fresh
    assert model.routing(1).affinity == pytest.approx(model.routing(3).affinity)  # 4-7 borrows from batch 1
    assert 0.3 < model.routing(1).affinity < 0.7
    assert model.routing(8).affinity > 0.8  # its own measurement stands


def test_speculative_steps_are_priced_as_their_batch_size_measured_them():
    """The linear fit is shared by every batch size; its error on speculative steps has one sign per bucket (CPU
    engine: batch-1 verifies 1.24-1.47x its prediction, batch-8 ones 0.80x). After a refit each bucket's speculative
    steps are priced at what they measured, plain steps at what theirs measured, and the spread of the speculative
    steps' ratio is reported."""
    shape = MoeShape(32, 4, 4)
    model, linear = (StepTimeModel(shape, TRUTH, calibrate=c) for c in (True, False))
    rng = random.Random(3)
    for _ in range(40):
        for m in (model, linear):
            m.add(1, 1, [4] * 4, 0, 0, verify_s=0.030, draft_s=0.0, other_s=0.0005, plain=True)
            m.add(8, 8, [20] * 4, 0, 0, verify_s=0.100, draft_s=0.0, other_s=0.001, plain=True)
        b1 = 0.060 * (1 + rng.uniform(-0.02, 0.02))  # one draft at batch 1: dearer than a line through batch 8
        b8 = 0.120 * (1 + rng.uniform(-0.02, 0.02))  # one draft each at batch 8
        for m in (model, linear):
            m.add(2, 1, [7] * 4, 1, 1, verify_s=b1 - 0.007, draft_s=0.005, other_s=0.002, accepted=1)
            m.add(16, 8, [24] * 4, 1, 8, verify_s=b8 - 0.009, draft_s=0.006, other_s=0.003, accepted=4)
    model.refit()
    linear.refit()
    assert linear.step_time(2, 1, 1, 1, accepted=1) < 0.057  # the shared line prices batch 1 too cheap
    assert model.step_time(2, 1, 1, 1, accepted=1) == pytest.approx(0.060, rel=0.03)
    assert model.step_time(16, 8, 1, 8, accepted=4) == pytest.approx(0.120, rel=0.03)
    assert model.step_time(1, 1, 0, 0) == pytest.approx(0.0305, rel=0.01)  # plain: by its own ratio
    assert model.step_time(8, 8, 0, 0) == pytest.approx(0.101, rel=0.01)
    assert 0.0 < model.error(1) < 0.02 and model.error(4) is None  # batch 4 measured nothing
    assert model.step_time(8, 4, 1, 4) == linear.step_time(8, 4, 1, 4)  # an unmeasured bucket is not scaled
    assert linear.error(1) is None


def test_plain_steps_are_priced_as_their_batch_size_measured_them():
    """The fit is shared by plain and speculative steps of every batch size and misses plain steps by a bias of
    their own (CPU engine, moe-fine x48: measured / predicted 0.94 at batch 1, 0.73 at batch 8); each bucket's plain
    steps are priced by their own ratio, so a plain step is not priced dearer than it is against calibrated
    speculative ones."""
    shape = MoeShape(32, 4, 4)
    model, linear = (StepTimeModel(shape, TRUTH, calibrate=c) for c in (True, False))
    for _ in range(30):
        for m in (model, linear):
            m.add(1, 1, [4] * 4, 0, 0, verify_s=0.029, draft_s=0.0, other_s=0.001, plain=True)
            m.add(2, 1, [7] * 4, 0, 1, verify_s=0.050, draft_s=0.0, other_s=0.002, accepted=0)
            m.add(3, 1, [9] * 4, 0, 2, verify_s=0.058, draft_s=0.0, other_s=0.002, accepted=0)
            m.add(16, 8, [24] * 4, 0, 8, verify_s=0.140, draft_s=0.0, other_s=0.005, accepted=4)
            m.add(8, 8, [21] * 4, 0, 0, verify_s=0.092, draft_s=0.0, other_s=0.004, plain=True)
    model.refit()
    linear.refit()
    assert linear.step_time(1, 1, 0, 0) > 1.1 * 0.030  # the shared line
    assert model.step_time(1, 1, 0, 0) == pytest.approx(0.030, rel=0.01)
    assert model.step_time(8, 8, 0, 0) == pytest.approx(0.096, rel=0.01)
    assert model.step_time(2, 1, 0, 1, accepted=0) == pytest.approx(0.052, rel=0.01)  # speculative: its own ratio


def test_a_bucket_asks_for_a_refit_when_it_can_first_be_calibrated():
    """Refits come every 16 steps; a batch size whose speculative steps were mispriced says so after 4, 8 and 16 of
    them (the policy refits then while warming up), and is priced by what they measured once refitted."""
    model = StepTimeModel(MoeShape(32, 4, 4), TRUTH)
    model.add(1, 1, [4] * 4, 0, 0, verify_s=0.03, draft_s=0.0, other_s=0.0, plain=True)
    predicted = model.step_time(2, 1, 1, 1, accepted=1)
    due = []
    for _ in range(9):
        model.add(2, 1, [7] * 4, 1, 1, verify_s=2 * predicted, draft_s=0.0, other_s=0.0, accepted=1)
        due.append(model.calibration_due())
        if due[-1]:
            model.refit()
    assert due == [False, False, False, False, True, False, False, False, True]  # the first step at a size: unfitted
    assert model.step_time(2, 1, 1, 1, accepted=1) == pytest.approx(2 * predicted, rel=0.05)


def test_a_buckets_speculative_steps_of_many_sizes_are_calibrated_after_its_first():
    """Ragged verifies at batch 8 come in many sizes: only the bucket's first speculative step is left out (one-time
    costs, StepTimeModel.warmed), so steps each of a size not seen before calibrate it (CPU engine, NGRAM: left out
    as first of their size, eight requests' steps were priced at 0.69-0.78x what they took)."""
    model = StepTimeModel(MoeShape(32, 4, 4), TRUTH)
    model.add(8, 8, [16] * 4, 0, 0, verify_s=0.03, draft_s=0.0, other_s=0.0, plain=True)
    sizes = [13, 24, 32, 31, 19, 28]
    predicted = {n: model.step_time(n, 8, 0, 0, accepted=(n - 8) / 2) for n in sizes}
    for n in sizes:
        model.add(n, 8, [24] * 4, 0, 0, verify_s=1.4 * predicted[n], draft_s=0.0, other_s=0.0, accepted=(n - 8) // 2)
        if model.calibration_due():
            model.refit()
    assert model.warmed(8, False) and not model.warmed(1, False)
    assert model.step_time(24, 8, 0, 0, accepted=8) == pytest.approx(1.4 * predicted[24], rel=0.05)


def test_calibration_groups_fall_back_to_coarser_ones_until_they_have_enough_steps():
    """Calibration.ratio_for: the group of the same draft depth and outcome where it has min_steps steps, else the
    same depth, else the same outcome, else all steps."""
    from service.policy.step_calibration import Calibration

    calibration = Calibration(lambda step: 1.0, min_steps=4)
    # (tokens, requests, draft_steps, draft_tokens, backlog_tokens, accepted): 3-draft steps, accepted or not
    for _ in range(4):
        calibration.add((4, 1, 3, 3, 0, 3), 2.0)
        calibration.add((4, 1, 3, 3, 0, 0), 4.0)
    for _ in range(3):
        calibration.add((2, 1, 1, 1, 0, 1), 8.0)  # one-draft steps: too few for a group of their own
    calibration.refit()
    assert calibration.ratio_for(3, 1.0) == pytest.approx(2.0)
    assert calibration.ratio_for(3, 0.2) == pytest.approx(4.0)
    assert calibration.ratio_for(3, None) == pytest.approx(8**0.5)  # the depth's 8 steps: between the 2s and 4s
    assert calibration.ratio_for(1, 1.0) == pytest.approx(2.0)  # depth 1 too thin: the mostly accepted steps'
    assert calibration.ratio_for(None, None) == calibration.ratio == pytest.approx(4.0)
    assert calibration.spread == pytest.approx(0.0)  # 8 of 11 steps sit at their own group's ratio


def test_the_error_is_the_spread_of_the_steps_at_the_depth_priced():
    """Calibration.spread_for: a measured draft depth's own spread; None for a depth not measured; the spread of
    all steps where no step drafted per depth (NGRAM's lookup does not follow K)."""
    from service.policy.step_calibration import Calibration

    calibration = Calibration(lambda step: 1.0, min_steps=4)
    for i in range(8):
        calibration.add((2, 1, 1, 1, 0, 1), 2.0 * (1.1 if i % 2 else 1.0))  # one-draft steps, 10 % apart
    calibration.refit()
    assert calibration.spread_for(1) == pytest.approx(math.log(1.1) / 2)
    assert calibration.spread_for(3) is None
    assert calibration.spread_for(None) == calibration.spread
    lookups = Calibration(lambda step: 1.0, min_steps=4)
    for i in range(8):
        lookups.add((4, 1, 0, 3, 0, 3), 2.0 * (1.1 if i % 2 else 1.0))  # draft_steps 0: a lookup
    lookups.refit()
    assert lookups.spread_for(3) == lookups.spread == pytest.approx(math.log(1.1) / 2)


@pytest.mark.parametrize("ratio", [0.5, 1.0])
def test_a_speculative_step_is_never_priced_under_a_plain_one(ratio):
    """A verify does all a plain decode of its requests does: where a calibration or a request's own ratio would put
    a speculative step under a plain one, it is priced at the plain one (drafts must not look free)."""
    model = StepTimeModel(MoeShape(32, 4, 4), StepCoefficients(1e-3, 1e-5, 1e-5, 0.0, 0.0, 1e-3), ridge=1e-6)
    for _ in range(16):  # plain steps measured dear, speculative ones cheap: the two calibrations disagree
        model.add(1, 1, [4] * 4, 0, 0, verify_s=0.030, draft_s=0.0, other_s=0.0005, plain=True)
        model.add(2, 1, [8] * 4, 1, 1, verify_s=0.010, draft_s=0.002, other_s=0.001)
        model.add(4, 1, [16] * 4, 3, 3, verify_s=0.012, draft_s=0.006, other_s=0.001)
    model.refit()
    priced = model.owning(ratio)
    plain_step, plain_forward = priced.step_time(1, 1, 0, 0), priced.verify_time(1, 1)
    for tokens in (2, 3, 4):
        assert priced.step_time(tokens, 1, tokens - 1, tokens - 1) >= plain_step
        assert priced.verify_time(tokens, 1) >= plain_forward
    assert model.owning(0.5).step_time(4, 1, 3, 3) == plain_step  # the floor is what binds here


def test_a_bucket_prices_its_first_speculative_steps_by_its_plain_steps_bias_only_upward():
    """The fit is shared by every batch size; where a batch size's plain steps ran over it and none of its
    speculative steps was measured yet, those are priced by the same ratio; where its plain steps ran under it, by
    the fit alone (CPU engine, batch 8: plain steps 0.72x the fit, STANDALONE verifies of eight requests ~1.17x it;
    priced by the plain ratio, each arithmetic wave paid first judgements that no static K could repay). Once its
    speculative steps are measured they price themselves."""
    line = lambda tokens, experts: 0.010 + 0.005 * tokens + 0.001 * 4 * experts  # noqa: E731  batch 1's

    def fitted(batch: int, experts: int, plain_s: float) -> tuple[StepTimeModel, StepTimeModel]:
        """(calibrated, the fit alone) after batch-1 steps on `line` and plain steps of `batch` taking plain_s."""
        models = tuple(StepTimeModel(MoeShape(32, 4, 4), TRUTH, calibrate=c) for c in (True, False))
        for _ in range(30):
            for m in models:
                m.add(1, 1, [4] * 4, 0, 0, verify_s=line(1, 4), draft_s=0.0, other_s=0.001, plain=True)
                for tokens, routed in ((2, 4), (2, 8), (4, 4), (4, 12)):
                    verify = line(tokens, routed) + 0.002
                    m.add(tokens, 1, [routed] * 4, tokens - 1, tokens - 1, verify, 0.004 * (tokens - 1), 0.002)
                m.add(batch, batch, [experts] * 4, 0, 0, verify_s=plain_s, draft_s=0.0, other_s=0.001, plain=True)
        for m in models:
            m.refit()
        return models

    model, linear = fitted(8, 21, 0.040)
    bias = model.step_time(8, 8, 0, 0) / linear.step_time(8, 8, 0, 0)
    assert bias < 0.9  # the batch-8 plain steps ran under the shared line
    speculative = model.step_time(24, 8, 2, 16, accepted=12)
    assert speculative == pytest.approx(linear.step_time(24, 8, 2, 16, accepted=12), rel=1e-9)
    over, fit = fitted(2, 8, 2 * line(2, 8))  # batch-2 plain steps that ran over the shared line
    up = over.step_time(2, 2, 0, 0) / fit.step_time(2, 2, 0, 0)
    assert up > 1.2
    assert over.step_time(6, 2, 2, 4, accepted=2) == pytest.approx(up * fit.step_time(6, 2, 2, 4, accepted=2), rel=1e-9)
    for _ in range(8):  # measured now: priced at what they took
        model.add(24, 8, [26] * 4, 2, 16, verify_s=0.150, draft_s=0.010, other_s=0.003, accepted=12)
    model.refit()
    assert model.step_time(24, 8, 2, 16, accepted=12) == pytest.approx(0.163, rel=0.02)


def test_the_verify_paths_extra_cost_is_trusted_by_the_speculative_steps_that_measured_it(monkeypatch):
    """verify_extra is informed by speculative steps only: fitted on two of them it took up their residuals (CPU
    engine: 4.9 ms a request against a 15 ms plain step) and priced every later draft out. Until EXTRA_TRUST_STEPS
    are fitted it counts in proportion; from then on it is the fit's."""
    from service.policy import cost_model

    def fitted(spec_steps):
        model = StepTimeModel(MoeShape(64, 8, 4), StepCoefficients(1e-3, 1e-5, 1e-5, 0.0, 0.0, 1e-3), ridge=1e-6)
        for i in range(40):
            batch = 1 + i % 4
            model.add(batch, batch, [8] * 4, 0, 0, verify_s=0.004 + 1e-4 * batch, draft_s=0.0, other_s=5e-4, plain=True)
        for i in range(spec_steps + 2):  # the first step of each of the two sizes is not fitted
            batch = 1 + i % 2
            verify_s = 0.004 + 1e-4 * 2 * batch + 0.005 * batch
            model.add(2 * batch, batch, [8] * 4, 0, 0, verify_s=verify_s, draft_s=0.0, other_s=0.002)
        model.refit()
        return model.coef.verify_extra

    trusted = cost_model.EXTRA_TRUST_STEPS
    assert fitted(trusted) == pytest.approx(0.005, rel=0.05)
    assert fitted(3 * trusted) == pytest.approx(0.005, rel=0.05)
    assert fitted(2) == pytest.approx(0.005 * 2 / trusted, rel=0.05)  # the prior's 0 for the rest


def test_a_refit_calibration_takes_the_steps_measured_until_it_is_first_asked():
    """A refit marks each bucket's calibration for recomputing, which happens at its first scaled price
    (step_pricer.StepPricer.scale); a step's raw price (StepTimeModel.add counts a step's experts by the model where
    the engine did not) must not recompute it on the way, with the step not yet among its rows: two models fed the
    same plain steps, one with measured expert counts and one without, price a plain step alike."""
    shape = MoeShape(32, 4, 4)
    counted, uncounted = StepTimeModel(shape, TRUTH), StepTimeModel(shape, TRUTH)
    for model in (counted, uncounted):
        for _ in range(6):
            model.add(1, 1, [4] * 4, 0, 0, verify_s=0.030, draft_s=0.0, other_s=0.0005, plain=True)
        model.refit()
    for _ in range(6):
        counted.add(1, 1, [4] * 4, 0, 0, verify_s=0.060, draft_s=0.0, other_s=0.0005, plain=True)
        uncounted.add(1, 1, (), 0, 0, verify_s=0.060, draft_s=0.0, other_s=0.0005, plain=True)
    assert uncounted.step_time(1, 1, 0, 0) == counted.step_time(1, 1, 0, 0)
    assert counted.step_time(1, 1, 0, 0) == pytest.approx(0.0605, rel=0.05)  # the later steps count: 6 of 11
