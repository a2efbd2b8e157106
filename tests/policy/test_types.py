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


@pytest.mark.parametrize(("layout", "tokens"), [("ragged", 2 + 4 + 1), ("rectangular", 3 * 4), ("fixed", 3 * 6)])
def test_verify_tokens_by_layout(layout, tokens):
    view = BatchView(now=0.0, requests=(), max_k=5, verify_layout=layout)
    assert view.verify_tokens([1, 3, 0]) == tokens


def test_unknown_verify_layout_is_rejected():
    with pytest.raises(ValueError, match="verify_layout"):
        BatchView(now=0.0, requests=(), max_k=3, verify_layout="jagged")


def test_step_verify_tokens_follow_the_width():
    requests = (RequestStepStats("a", 0, 0), RequestStepStats("b", 2, 1))
    common = dict(now=0.0, batch_size=2, requests=requests, draft_s=0.0, verify_s=0.1, other_s=0.0)
    assert StepStats(**common).verify_tokens == 1 + 3
    assert StepStats(**common, verify_width=3).verify_tokens == 6
