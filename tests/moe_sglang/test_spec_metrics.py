"""StepStats → moe_serve:* metrics: per request K, speculation off, accept per position, utility, experts."""

import pytest
from prometheus_client import CollectorRegistry

from moe_sglang import metrics as m
from service.policy import RequestStepStats, StepStats


def recorded(policies, tenants, requests, unique=(), dropped=0, width=0, chosen=()):
    registry = CollectorRegistry()
    stats = StepStats(
        now=1.0,
        batch_size=len(requests),
        requests=tuple(RequestStepStats(f"r{i}", k, a) for i, (k, a) in enumerate(requests)),
        draft_s=0.01,
        verify_s=0.1,
        other_s=0.02,
        unique_experts=unique,
        verify_width=width,
    )
    metrics = m.SpecMetrics(registry)
    metrics.record(policies, tenants, stats, dropped, chosen)
    metrics.flush()
    return lambda name, **labels: registry.get_sample_value(name, labels)


def test_mixed_step():
    get = recorded(["static", "static", "cascade"], ["a", "b", "a"], [(0, 0), (3, 2), (2, 2)], unique=(3, 5), dropped=4)
    assert get(m.SPEC_OFF + "_total", policy="static", tenant="a") == 1
    assert get(m.SPEC_OFF + "_total", policy="static", tenant="b") is None
    assert get(m.K_CHOSEN + "_sum", policy="static", tenant="b") == 3
    assert [get(m.PROPOSED_AT + "_total", policy="static", position=str(p)) for p in (1, 2, 3)] == [1, 1, 1]
    assert [get(m.ACCEPTED_AT + "_total", policy="static", position=str(p)) for p in (1, 2)] == [1, 1]
    assert get(m.ACCEPTED_AT + "_total", policy="static", position="3") is None
    # static: (1 + 3) emitted / (1 + 4) verified; cascade: 3 / 3
    assert get(m.UTILITY + "_sum", policy="static") == 4 / 5
    assert get(m.UTILITY + "_sum", policy="cascade") == 1.0
    assert get(m.MIXED_STEPS + "_total") == 1
    assert get(m.UNIQUE_EXPERTS + "_count", policy="mixed") == 2
    assert get(m.UNIQUE_EXPERTS + "_bucket", policy="mixed", le="4.0") == 1
    assert get(m.BUDGET_DROPPED + "_total", policy="mixed") == 4
    assert get(m.STEP_SECONDS + "_sum", phase="verify") == 0.1


def test_rectangular_verify_utility_counts_every_request_at_the_width():
    # the verify ran 3 tokens for each of 2 requests although one may accept none
    get = recorded(["static", "static"], ["a", "a"], [(0, 0), (2, 2)], width=3)
    assert get(m.UTILITY + "_sum", policy="static") == 4 / 6
    ragged = recorded(["static", "static"], ["a", "a"], [(0, 0), (2, 2)])
    assert ragged(m.UTILITY + "_sum", policy="static") == 1.0


def test_forwards_are_counted_by_kind():
    registry = CollectorRegistry()
    metrics = m.SpecMetrics(registry)
    metrics.count_forward("verify", 7)
    metrics.count_forward("decode", 3)
    metrics.count_forward("decode", 2)
    metrics.count_draft()
    get = registry.get_sample_value
    assert get(m.VERIFY_TOKENS + "_total", {}) == 0  # held until the flush
    metrics.flush()
    assert get(m.DRAFT_PHASES + "_total", {}) == 1
    assert get(m.VERIFY_TOKENS + "_total", {}) == 7 and get(m.DECODE_TOKENS + "_total", {}) == 5
    assert get(m.TARGET_FORWARDS + "_total", {"kind": "decode"}) == 2
    assert get(m.TARGET_FORWARDS + "_total", {"kind": "verify"}) == 1


def test_uniform_step_is_not_mixed():
    get = recorded(["static"], ["a"], [(3, 3)])
    assert get(m.MIXED_STEPS + "_total") == 0
    assert get(m.ACCEPT_LENGTH + "_sum", policy="static", tenant="a") == 4


def test_metrics_only_with_a_multiprocess_dir(monkeypatch):
    monkeypatch.delenv(m.MULTIPROC_ENV, raising=False)
    assert m.SpecMetrics.if_enabled() is None


def test_k_chosen_is_the_policys_choice_acceptance_counts_what_was_verified():
    # K = 3 chosen, but the drafter found one draft: one position verified (and accepted)
    get = recorded(["static"], ["a"], [(1, 1)], chosen=(3,))
    assert get(m.K_CHOSEN + "_sum", policy="static", tenant="a") == 3
    assert get(m.PROPOSED_AT + "_total", policy="static", position="1") == 1
    assert get(m.PROPOSED_AT + "_total", policy="static", position="2") is None
    assert get(m.SPEC_OFF + "_total", policy="static", tenant="a") is None


def test_held_steps_are_written_as_observing_each_would_have_written_them():
    """Steps recorded between flushes reach Prometheus summed per series and per bucket: the same samples as one
    `observe` / `inc` per value, bucket edges included (a value equal to a bound belongs to that bound's bucket)."""
    steps = [
        ([(0, 0), (3, 2), (2, 2)], (3, 5), 0.0003),
        ([(1, 1), (0, 0), (4, 4)], (4, 16), 0.001),
        ([(2, 0), (2, 2), (0, 0)], (8, 1), 0.05),
    ]
    held, direct = CollectorRegistry(), CollectorRegistry()
    metrics, reference = m.SpecMetrics(held), m.SpecMetrics(direct)
    for requests, unique, seconds in steps:
        stats = StepStats(
            now=1.0,
            batch_size=3,
            requests=tuple(RequestStepStats(f"r{i}", k, a) for i, (k, a) in enumerate(requests)),
            draft_s=seconds,
            verify_s=0.1,
            other_s=0.02,
            unique_experts=unique,
        )
        metrics.record(["static", "static", "cascade"], ["a", "b", "a"], stats, 2)
        reference.record(["static", "static", "cascade"], ["a", "b", "a"], stats, 2)
        reference.flush()
    metrics.count_forward("verify", 9)
    reference.count_forward("verify", 9)
    reference.flush()

    def samples(registry):
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples}

    written = samples(held)
    assert all(v == 0 for (name, _), v in written.items() if not name.endswith("_created")), "nothing before a flush"
    metrics.flush()
    mine, theirs = samples(held), samples(direct)
    mine = {k: v for k, v in mine.items() if not k[0].endswith("_created")}
    theirs = {k: v for k, v in theirs.items() if not k[0].endswith("_created")}
    assert mine == pytest.approx(theirs) and len(mine) > 40
    assert held.get_sample_value(m.K_CHOSEN + "_bucket", {"policy": "static", "tenant": "b", "le": "2.0"}) == 2


def test_a_flush_is_due_after_flush_s_and_when_a_request_finishes(monkeypatch):
    from moe_sglang.request_stats import RequestStatsBook

    registry = CollectorRegistry()
    metrics = m.SpecMetrics(registry)
    clock = {"now": 100.0}
    monkeypatch.setattr(m.time, "monotonic", lambda: clock["now"])
    metrics.flush()
    stats = StepStats(
        now=1.0, batch_size=1, requests=(RequestStepStats("r0", 0, 0),), draft_s=0.0, verify_s=0.1, other_s=0.0
    )
    metrics.record(["static"], ["a"], stats, 0)
    off = lambda: registry.get_sample_value(m.SPEC_OFF + "_total", {"policy": "static", "tenant": "a"})  # noqa: E731
    assert off() in (None, 0.0)  # not written yet
    clock["now"] += m.SpecMetrics.FLUSH_S
    metrics.record(["static"], ["a"], stats, 0)
    assert off() == 2
    metrics.record(["static"], ["a"], stats, 0)
    book = RequestStatsBook()
    book.on_finish.append(metrics.flush)
    book.finish("r0", 3)
    assert off() == 3
