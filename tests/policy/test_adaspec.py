import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.policy.adaspec import AdaSpecPolicy
from service.policy.base import plan
from service.policy.types import BatchView, RequestStepStats, RequestView, StepStats
from tests.policy.helpers import batch

# seconds: fixed, per verify token, per context token, per draft step, per draft token
COEF = (8e-3, 2e-4, 0.0, 1e-3, 2e-5)


def policy(**kw):
    return AdaSpecPolicy(prior=COEF, **kw)


def chains(confs):
    """Cumulative acceptance P(draft i accepted) = Π_{j<=i} c_j."""
    out = []
    for cs in confs:
        run, p = 1.0, []
        for c in cs:
            run *= c
            p.append(run)
        out.append(p)
    return out


@pytest.mark.parametrize(
    ("mean_conf", "expected"),
    [
        (0.05, 0),  # the k=1 vs k=0 gate: speculation would not pay
        (0.6, 2),  # Θ(k) peaks at k = 2 for this time model and batch
        (0.95, 7),  # near-certain drafts: up to k_max
    ],
)
def test_predict_grows_k_while_throughput_rises(mean_conf, expected):
    p = policy(k_max=7, confidence_prior=mean_conf)
    b = batch(4)
    d = p.decide(b)
    assert {r.k for r in d.requests} == {expected}

    # Θ at the chosen k is at least Θ one step either side
    def theta(k):
        run = sum(mean_conf**i for i in range(1, k + 1))
        return 4 * (1 + run) / p.time.predict(4 * (k + 1), 2000, k, 4 * k)

    k = expected
    assert theta(k) >= theta(max(k - 1, 0))
    if k < 7:
        assert theta(k) >= theta(k + 1)


def test_running_mean_confidence_starts_at_the_prior_and_learns():
    p = policy(confidence_prior=0.6)
    assert p.confidence("r0") == 0.6
    b = batch(2, confidences=(0.9, 0.9, 0.9))
    p.trim(b, plan(b, [3, 3]))
    assert p.confidence("r0") == pytest.approx(0.9)
    assert 0.6 < p.mean_conf < 0.9  # the batch-wide prior moves too


def test_trim_drops_low_confidence_tails_per_request():
    p = policy()
    b = BatchView(
        0.0,
        (RequestView("a", draft_confidences=(0.95, 0.95, 0.95)), RequestView("b", draft_confidences=(0.9, 0.05, 0.05))),
        7,
    )
    d = p.trim(b, plan(b, [3, 3]))
    assert d.requests[0].verify_len == 3
    assert d.requests[1].verify_len == 1


@settings(max_examples=60, deadline=None)
@given(
    confs=st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=6), min_size=1, max_size=8),
    start=st.data(),
)
def test_elimination_never_lowers_predicted_throughput(confs, start):
    p = policy()
    accept = chains(confs)
    lens = [start.draw(st.integers(0, len(a))) for a in accept]
    b = batch(len(accept))
    after = p.eliminate(b, accept, lens)
    assert all(0 <= x <= y for x, y in zip(after, lens, strict=True))
    assert p.throughput(b, accept, after) >= p.throughput(b, accept, lens)


@settings(max_examples=60, deadline=None)
@given(
    confs=st.lists(st.lists(st.floats(0.0, 1.0), min_size=0, max_size=6), min_size=1, max_size=8),
    tpot=st.floats(5e-3, 3e-2),
)
def test_slo_cap_is_never_exceeded_by_the_chosen_configuration(confs, tpot):
    p = policy()
    b = batch(len(confs), tpot_s=tpot)
    accept = chains(confs)
    lens = p.trim_lengths(b, accept)
    draft_steps = max((len(a) for a in accept), default=0)
    t = p.time.predict(
        sum(lens) + len(lens), b.requests[0].context_len * len(lens), draft_steps, sum(len(a) for a in accept)
    )
    assert t <= tpot or sum(lens) == 0
    d = p.decide(b)
    k = d.requests[0].k
    t_k = p.time.predict(len(confs) * (k + 1), 500 * len(confs), k, len(confs) * k)
    assert t_k <= tpot or k == 0


def test_time_model_refits_from_observed_steps():
    p = AdaSpecPolicy(prior=(0.0, 0.0, 0.0, 0.0, 0.0), refit_every=1)
    truth = (5e-3, 1e-4, 1e-7, 8e-4, 3e-5)
    rng = random.Random(0)
    for _ in range(60):
        n = rng.randint(1, 16)
        ks = [rng.randint(0, 4) for _ in range(n)]
        ctx = rng.randint(100, 20000)
        feats = (1, sum(ks) + n, ctx, max(ks), sum(ks))
        t = sum(c * f for c, f in zip(truth, feats, strict=True))
        p.observe(
            StepStats(
                0.0,
                n,
                tuple(RequestStepStats(f"r{i}", k, 0) for i, k in enumerate(ks)),
                0.0,
                t,
                0.0,
                context_tokens=ctx,
                draft_steps=max(ks),
            )
        )
    assert p.time.coef == pytest.approx(truth, rel=3e-2)  # a little ridge pull toward the (zero) prior remains
