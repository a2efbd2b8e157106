"""Schedule transforms: properties over generated schedules (hypothesis) plus a few exact cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.traces import schedule as sched
from service.traces.types import Schedule, TraceRequest, blocks_for


@st.composite
def schedules(draw):
    n = draw(st.integers(0, 40))
    gaps = draw(st.lists(st.floats(0, 5), min_size=n, max_size=n))
    requests, t = [], 0.0
    for gap in gaps:
        t += gap
        n_in = draw(st.integers(1, 3000))
        blocks = tuple(draw(st.lists(st.integers(0, 30), min_size=blocks_for(n_in), max_size=blocks_for(n_in))))
        requests.append(
            TraceRequest(
                arrival_s=t,
                input_tokens=n_in,
                output_tokens=draw(st.integers(0, 600)),
                prefix_blocks=blocks,
                session=draw(st.sampled_from([None, "a", "b", "c", "d"])),
            )
        )
    return Schedule(tuple(requests), "synthetic")


@settings(deadline=None)  # a loaded CI box must not turn slowness into failures
@given(schedules(), st.floats(0, 50), st.floats(0.1, 50))
def test_window_keeps_exactly_the_range_rebased(s, start, length):
    w = sched.window(s, start, start + length)
    expected = [r for r in s.requests if start <= r.arrival_s < start + length]
    assert len(w) == len(expected)
    assert all(0 <= r.arrival_s < length + 1e-9 for r in w.requests)
    assert [r.arrival_s for r in w.requests] == pytest.approx([r.arrival_s - start for r in expected])


@settings(deadline=None)  # a loaded CI box must not turn slowness into failures
@given(schedules(), st.floats(0.1, 10), st.floats(0.1, 10))
def test_compress_divides_times_and_composes(s, k1, k2):
    once = sched.compress(s, k1 * k2)
    twice = sched.compress(sched.compress(s, k1), k2)
    assert [r.arrival_s for r in once.requests] == pytest.approx([r.arrival_s / (k1 * k2) for r in s.requests])
    assert [r.arrival_s for r in twice.requests] == pytest.approx([r.arrival_s for r in once.requests])


@settings(deadline=None)  # a loaded CI box must not turn slowness into failures
@given(schedules(), st.floats(0.01, 1.0), st.integers(0, 5))
def test_thin_keeps_whole_sessions(s, fraction, seed):
    t = sched.thin(s, fraction, seed)
    kept_ids = {id(r) for r in t.requests}
    assert kept_ids <= {id(r) for r in s.requests}
    for session in {r.session for r in s.requests} - {None}:
        members = [id(r) in kept_ids for r in s.requests if r.session == session]
        assert all(members) or not any(members)
    assert sched.thin(s, fraction, seed) == t  # same seed, same outcome


def test_thin_keeps_about_the_fraction():
    s = Schedule(tuple(TraceRequest(i, 1, 1, (i,)) for i in range(4000)), "synthetic")
    assert len(sched.thin(s, 0.25, seed=1)) == pytest.approx(1000, abs=100)
    assert len(sched.thin(s, 1.0)) == 4000


@settings(deadline=None)  # a loaded CI box must not turn slowness into failures
@given(schedules(), st.integers(1, 4), st.floats(0, 20))
def test_overlay_copies_have_disjoint_prefixes_and_keep_sharing(s, copies, shift):
    o = sched.overlay(s, copies, shift)
    assert len(o) == copies * len(s)
    span = 1 + max((b for r in s.requests for b in r.prefix_blocks), default=-1)
    by_copy: dict[int, set[int]] = {}
    for r in o.requests:
        for b in r.prefix_blocks:
            by_copy.setdefault(b // span, set()).add(b)
    assert set(by_copy) <= set(range(copies))
    # Within each copy the block ids are the original ids shifted, so the trace's own sharing is kept.
    original = {b for r in s.requests for b in r.prefix_blocks}
    for c, ids in by_copy.items():
        assert {b - c * span for b in ids} == original


def test_overlay_exact_case():
    s = Schedule((TraceRequest(0.0, 600, 5, (0, 1), "x"), TraceRequest(2.0, 10, 5, (0,), None)), "synthetic")
    o = sched.overlay(s, 2, 1.0)
    assert [(r.arrival_s, r.prefix_blocks, r.session) for r in o.requests] == [
        (0.0, (0, 1), "x"),
        (1.0, (2, 3), "x#1"),
        (2.0, (0,), None),
        (3.0, (2,), None),
    ]


@settings(deadline=None)  # a loaded CI box must not turn slowness into failures
@given(schedules(), st.integers(2, 4000), st.sampled_from(["clip", "skip"]))
def test_fit_context(s, context, mode):
    fitted, fit = sched.fit_context(s, context, mode)
    assert all(r.input_tokens + r.output_tokens <= context for r in fitted.requests)
    assert all(len(r.prefix_blocks) == blocks_for(r.input_tokens) for r in fitted.requests)
    too_long = sum(r.input_tokens + r.output_tokens > context for r in s.requests)
    assert fit.clipped + fit.skipped == too_long
    assert len(fitted) == len(s) - fit.skipped
    if mode == "skip":
        assert fit.clipped == 0


def test_fit_context_clips_to_leading_blocks():
    s = Schedule((TraceRequest(0.0, 1500, 100, (7, 8, 9)), TraceRequest(1.0, 10, 5000, (1,))), "synthetic")
    fitted, fit = sched.fit_context(s, 1000, "clip")
    assert (fit.clipped, fit.skipped) == (1, 1)  # the second one's output alone does not fit
    assert fitted.requests[0].input_tokens == 900 and fitted.requests[0].prefix_blocks == (7, 8)


@settings(max_examples=50, deadline=None)
@given(schedules())
def test_failed_requests(s):
    dropped = sched.failed_requests(s, "drop")
    assert [r for r in s.requests if r.output_tokens > 0] == list(dropped.requests)
    one = sched.failed_requests(s, "one-token")
    assert [max(r.output_tokens, 1) for r in s.requests] == [r.output_tokens for r in one.requests]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: sched.window(s, 5, 5), "start < end"),
        (lambda s: sched.compress(s, 0), "time scale"),
        (lambda s: sched.thin(s, 0), "fraction"),
        (lambda s: sched.overlay(s, 0, 1), "copies"),
        (lambda s: sched.fit_context(s, 1), "at least 2"),
        (lambda s: sched.failed_requests(s, "keep"), "drop or one-token"),
        (lambda s: sched.parse_window("60"), "START:END"),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call(Schedule((), "synthetic"))


def test_parse_window():
    assert sched.parse_window("600:660") == (600.0, 660.0)
    assert sched.parse_window(":60") == (0.0, 60.0)
    assert sched.parse_window("10:") == (10.0, float("inf"))


def test_unsorted_schedule_is_rejected():
    with pytest.raises(ValueError, match="not sorted"):
        Schedule((TraceRequest(1.0, 1, 1, (0,)), TraceRequest(0.0, 1, 1, (1,))), "synthetic")


def test_cap_output_caps_only_longer_outputs_and_keeps_arrivals():
    from service.traces.schedule import cap_output

    s = Schedule(
        tuple(
            TraceRequest(arrival_s=t, input_tokens=10, output_tokens=o, prefix_blocks=(), session=None)
            for t, o in [(0.0, 5), (1.0, 50), (2.5, 8)]
        ),
        "synthetic",
    )
    capped, count = cap_output(s, 8)
    assert [r.output_tokens for r in capped.requests] == [5, 8, 8] and count == 1
    assert [r.arrival_s for r in capped.requests] == [0.0, 1.0, 2.5]
    with pytest.raises(ValueError):
        cap_output(s, 0)
