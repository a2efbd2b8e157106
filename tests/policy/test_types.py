import pytest

from service.policy.types import BatchView, Decision, RequestDecision, RequestStepStats, StepStats


@pytest.mark.parametrize(
    ("k", "verify_len"),
    [(0, 1), (2, 3), (2, -1)],
)
def test_decision_rejects_verify_len_outside_0_to_k(k, verify_len):
    with pytest.raises(ValueError, match="verify_len"):
        RequestDecision("a", k, verify_len)


@pytest.mark.parametrize(("k", "accepted"), [(0, 1), (3, 4), (1, -1)])
def test_step_stats_reject_accepted_outside_0_to_k(k, accepted):
    with pytest.raises(ValueError, match="accepted"):
        RequestStepStats("a", k, accepted)


def test_batch_rejects_negative_max_k():
    with pytest.raises(ValueError, match="max_k"):
        BatchView(now=0.0, requests=(), max_k=-1)


def test_step_stats_totals():
    s = StepStats(
        now=1.0,
        batch_size=2,
        requests=(RequestStepStats("a", 3, 2), RequestStepStats("b", 0, 0)),
        draft_s=0.001,
        verify_s=0.01,
        other_s=0.002,
    )
    assert s.step_s == pytest.approx(0.013)
    assert s.verify_tokens == 5  # (3 + 1) + (0 + 1)
    assert s.emitted_tokens == 4  # (2 + 1) + (0 + 1)


def test_decision_k_of():
    d = Decision((RequestDecision("a", 2, 1), RequestDecision("b", 0, 0)))
    assert d.k_of("a") == 2 and d.k_of("b") == 0
    with pytest.raises(KeyError):
        d.k_of("c")
