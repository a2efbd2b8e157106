"""The idle scheduler's burst gathering (moe_sglang/arrival_gather.py), driven with a fake scheduler, clock and
arrival schedule: a burst after a burst is received whole before its prefill; a burst after lone requests while its
requests keep coming; a lone request waits at most a quiet gap; a busy engine receives once per iteration."""

from __future__ import annotations

import pytest
from sglang.srt.managers.io_struct import BatchTokenizedGenerateReqInput, TokenizedGenerateReqInput
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from moe_sglang.arrival_gather import POLL_S, Gatherer


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class Req:
    def __init__(self, done: bool = False) -> None:
        self.done = done

    def finished(self) -> bool:
        return self.done


class Batch:
    def __init__(self, n: int = 0, forward_mode: ForwardMode = ForwardMode.DECODE) -> None:
        self.n = n
        self.reqs = [Req() for _ in range(n)]
        self.forward_mode = forward_mode

    def is_empty(self) -> bool:
        return self.n == 0


class Scheduler:
    """What `_idle` reads, and an inbox of (arrival time, request) that `ingest` empties up to the clock's time."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.inbox: list[tuple[float, object]] = []
        self.waiting_queue: list = []
        self.running_batch = Batch()
        self.chunked_req = None
        self.last_batch = None
        self._deferred_input_requests: list = []
        self.receives = 0

    def ingest(self) -> list:
        self.receives += 1
        due = [r for t, r in self.inbox if t <= self.clock.t]
        self.inbox = [(t, r) for t, r in self.inbox if t > self.clock.t]
        self.waiting_queue.extend(r for r in due if not isinstance(r, str))
        return due

    def prefill(self, duration: float) -> int:
        """One iteration as SGLang's: the last batch's requests join the running batch; then a prefill of the queue
        (its requests in the last batch, not yet running, as in SGLang until the next batch is planned), else a
        decode step of the running batch, else nothing."""
        if self.last_batch is not None and self.last_batch is not self.running_batch:
            self.running_batch = Batch(self.running_batch.n + self.last_batch.n)
        n, self.waiting_queue = len(self.waiting_queue), []
        prefill = Batch(n, ForwardMode.EXTEND)
        self.last_batch = prefill if n else (None if self.running_batch.is_empty() else self.running_batch)
        self.clock.t += duration if n else POLL_S
        return n

    def finish(self) -> None:
        self.last_batch, self.running_batch = None, Batch()

    def last_step_done(self) -> None:
        """The running batch's requests finished in the last step: SGLang drops them when it plans the next batch,
        so until then the last and the running batch still hold them."""
        for req in self.running_batch.reqs:
            req.done = True
        self.last_batch = self.running_batch


def request() -> TokenizedGenerateReqInput:
    return TokenizedGenerateReqInput(
        input_text="", input_ids=[1, 2], input_embeds=None, mm_inputs=None, token_type_ids=None, sampling_params=None,
        return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=True,
    )  # fmt: skip


def send(scheduler: Scheduler, at: float, offsets: list[float]) -> None:
    scheduler.inbox += [(at + o, request()) for o in offsets]


def ingest(gatherer: Gatherer, scheduler: Scheduler) -> list:
    return gatherer(lambda s: s.ingest(), scheduler)


def wave(
    gatherer: Gatherer, scheduler: Scheduler, at: float, offsets: list[float], prefill_s: float = 0.2
) -> list[int]:
    """A burst arriving at an idle engine from `at`: the sizes of the prefills until every request is prefilled."""
    scheduler.clock.t = at
    send(scheduler, at, offsets)
    sizes = []
    while scheduler.inbox or scheduler.waiting_queue:
        ingest(gatherer, scheduler)
        if n := scheduler.prefill(prefill_s):
            sizes.append(n)
    scheduler.finish()
    ingest(gatherer, scheduler)  # the engine idles again
    return sizes


def test_a_burst_after_a_burst_is_prefilled_whole():
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(100.0, clock=clock, sleep=clock.sleep)
    burst = [0.0, 0.061, 0.071, 0.075, 0.076, 0.077, 0.079, 0.080]  # seen: the first gap the longest
    # the first burst is split (nothing learnt yet): its first request alone, the rest one prefill later
    assert wave(gatherer, scheduler, 1.0, burst) == [1, 7]
    assert gatherer.open.requests == 8  # the seven received after the first prefill count as the burst's
    # the next bursts are received whole, the wait ending when the eighth request is in (not at the window)
    start = 5.0
    assert wave(gatherer, scheduler, start, burst) == [8]
    assert scheduler.last_batch is None and gatherer.gathered == 1
    assert wave(gatherer, scheduler, 9.0, [0.0, 0.02, 0.03, 0.035, 0.05, 0.09, 0.091, 0.092]) == [8]


def test_waiting_ends_at_the_window_and_lone_requests_then_wait_no_longer():
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(100.0, clock=clock, sleep=clock.sleep)
    wave(gatherer, scheduler, 1.0, [0.0] * 4)
    assert gatherer.open.requests == 4
    # a lone request after a burst waits for the window, once
    receives = scheduler.receives
    clock.t = 5.0
    send(scheduler, 5.0, [0.0])
    ingest(gatherer, scheduler)
    assert clock.t == pytest.approx(5.1, abs=2 * POLL_S) and scheduler.receives - receives > 100
    scheduler.prefill(0.2)
    scheduler.finish()
    # the next lone request: the last arrival was lone, and no prefill was measured to size a quiet gap
    clock.t = 9.0
    send(scheduler, 9.0, [0.0])
    receives = scheduler.receives
    assert len(ingest(gatherer, scheduler)) == 1
    assert clock.t == 9.0 and scheduler.receives - receives == 1


def lone(gatherer: Gatherer, scheduler: Scheduler, at: float, prefill_s: float) -> float:
    """A lone request at an idle engine: its prefill, one decode step, done. Returns how long its receive waited."""
    scheduler.clock.t = at
    send(scheduler, at, [0.0])
    ingest(gatherer, scheduler)
    waited = scheduler.clock.t - at
    scheduler.prefill(prefill_s)
    ingest(gatherer, scheduler)  # busy: the receive after the prefill
    scheduler.prefill(prefill_s)  # nothing queued: a decode step
    scheduler.finish()
    ingest(gatherer, scheduler)
    return waited


def test_a_burst_after_lone_requests_is_received_while_its_requests_keep_coming():
    """The first wave after lone requests (a batch-1 cell's) was split 1 + 7 or 2 + 6 by every synchronous engine;
    now an idle arrival keeps receiving while requests come within 5 % of the last prefill of each other."""
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(250.0, clock=clock, sleep=clock.sleep)
    assert lone(gatherer, scheduler, 1.0, 0.7) == 0.0  # no prefill measured yet: no wait
    assert gatherer.prefill_s == pytest.approx(0.7)
    assert lone(gatherer, scheduler, 3.0, 0.35) == pytest.approx(0.035, abs=2 * POLL_S)  # 5 % of 0.7 s, once
    # a wave whose second request reached the scheduler 7.6 ms after the first (bench/results/arrival-quiet-s55),
    # where the last prefill took 0.35 s: a 17.5 ms gap
    assert wave(gatherer, scheduler, 5.0, [0.0, 0.0076, 0.0081, 0.0102, 0.0109, 0.0127, 0.0141, 0.0149]) == [8]
    assert gatherer.gathered == 1 and gatherer.open.requests == 8


def test_a_gap_longer_than_the_quiet_gap_splits_and_the_window_bounds_the_wait():
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(50.0, clock=clock, sleep=clock.sleep)
    lone(gatherer, scheduler, 1.0, 0.2)  # quiet gap 10 ms from now on
    assert wave(gatherer, scheduler, 3.0, [0.0, 0.005, 0.03, 0.031]) == [2, 2]
    assert gatherer.open.requests == 4  # the two after the gap came before a decode step: the burst's
    other = Gatherer(50.0, clock=clock, sleep=clock.sleep)
    lone(other, scheduler, 5.0, 0.2)
    sizes = wave(other, scheduler, 7.0, [0.004 * i for i in range(40)])  # never quiet for 10 ms
    assert sizes[0] == pytest.approx(13, abs=1) and sum(sizes) == 40  # received for the 50 ms window, then prefilled


def test_a_busy_engine_receives_once_and_other_inputs_do_not_open_bursts():
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(100.0, clock=clock, sleep=clock.sleep)
    wave(gatherer, scheduler, 1.0, [0.0, 0.0, 0.01])
    scheduler.running_batch = Batch(3)  # requests decoding
    send(scheduler, clock.t, [0.0])
    receives = scheduler.receives
    assert len(ingest(gatherer, scheduler)) == 1 and scheduler.receives - receives == 1
    scheduler.finish()
    scheduler.waiting_queue.clear()
    # a control request (flush_cache, abort, ...) at an idle engine neither waits nor closes the burst
    scheduler.inbox.append((clock.t, "flush"))
    before = gatherer.open
    assert ingest(gatherer, scheduler) == ["flush"] and gatherer.open is before


def test_a_batch_request_counts_each_of_its_requests():
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(100.0, clock=clock, sleep=clock.sleep)
    batch = BatchTokenizedGenerateReqInput(batch=[request(), request(), request()])
    scheduler.inbox.append((0.0, batch))
    ingest(gatherer, scheduler)
    assert gatherer.open.requests == 3


def test_the_window_must_be_positive():
    with pytest.raises(ValueError, match="window"):
        Gatherer(0.0)


def test_a_burst_sent_as_the_last_one_finishes_is_still_gathered():
    """The next wave of a benchmark arrives in the receive right after the previous wave's last step, while SGLang's
    batches still hold its finished requests: the engine is idle, and the burst is received whole."""
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(100.0, clock=clock, sleep=clock.sleep)
    burst = [0.0, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09]
    wave(gatherer, scheduler, 1.0, burst)
    scheduler.running_batch = Batch(8)
    scheduler.last_step_done()
    clock.t = 5.0
    send(scheduler, 5.0, burst)
    received = ingest(gatherer, scheduler)
    assert len(received) == 8 and gatherer.gathered == 1
    # requests still decoding: busy, one receive
    scheduler.running_batch, scheduler.last_batch = Batch(2), None
    scheduler.running_batch.reqs[0].done = True
    send(scheduler, clock.t, [0.0])
    receives = scheduler.receives
    assert len(ingest(gatherer, scheduler)) == 1 and scheduler.receives - receives == 1


def test_a_burst_that_trickles_in_over_several_prefills_counts_whole():
    """Seen on a slow host (bench/results/sync-b8-s54): a wave of 8 prefilled as 1, 1 and 6 within 0.9 s. Every request
    received before the engine's first step that is not a prefill belongs to the burst, so the next wave waits for
    eight; requests that arrive after a decode step, beyond the window, do not."""
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(100.0, clock=clock, sleep=clock.sleep)
    trickle = [0.0, 0.1, 0.35, 0.36, 0.37, 0.38, 0.39, 0.395]
    assert wave(gatherer, scheduler, 1.0, trickle) == [1, 1, 6]
    assert gatherer.open.requests == 8
    assert wave(gatherer, scheduler, 5.0, [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07]) == [8]
    # a burst of 2 (gathered: the last one was 8), requests running; one more arrives right after their prefill
    assert wave(gatherer, scheduler, 9.0, [0.0, 0.05]) == [2]
    scheduler.last_batch, scheduler.running_batch = Batch(2, ForwardMode.EXTEND), Batch(2)
    send(scheduler, clock.t, [0.0])
    ingest(gatherer, scheduler)
    assert gatherer.open.requests == 3
    # then a decode step; a request arriving after it, beyond the window, is not the burst's
    scheduler.waiting_queue.clear()
    scheduler.prefill(0.03)
    clock.t = 9.5
    send(scheduler, clock.t, [0.0])
    ingest(gatherer, scheduler)
    assert gatherer.open.requests == 3 and gatherer.open.decoded


def test_a_burst_larger_than_the_last_is_received_while_its_requests_keep_coming():
    """Seen in the trace replay: Mooncake's ten simultaneous requests after a burst of two were received until two had
    come and prefilled as 2 + 8, 4 + 6, ...; once the last burst's size is reached, receiving goes on while the
    requests come within twice the longest gap between them so far (or 10 ms), and a burst of the last one's size
    waits only that long more."""
    clock = Clock()
    scheduler, gatherer = Scheduler(clock), Gatherer(250.0, clock=clock, sleep=clock.sleep)
    assert wave(gatherer, scheduler, 1.0, [0.0, 0.0], prefill_s=1.0) == [2]  # arrived together: nothing to wait for
    assert gatherer.prefill_s == 0.0  # (a prefill is measured from a receive after it, not in this fake's loop)
    gatherer.prefill_s = 1.0  # as measured after a 1 s prefill: a 10 ms floor (5 % would be 50 ms)
    ten = [0.0, 0.0005, 0.0010, 0.0030, 0.0036, 0.0041, 0.0080, 0.0090, 0.0095, 0.0110]
    assert wave(gatherer, scheduler, 5.0, ten, prefill_s=1.0) == [10]
    assert gatherer.open.requests == 10
    # the next burst of ten: its size reached, it waits twice its longest gap (3.9 ms) or the 10 ms floor, not the window
    scheduler.clock.t = 9.0
    send(scheduler, 9.0, ten)
    assert len(ingest(gatherer, scheduler)) == 10
    assert clock.t - 9.0 == pytest.approx(0.011 + 0.010, abs=2 * POLL_S)
    scheduler.prefill(1.0)
    scheduler.finish()
    # the window still bounds the wait for the last burst's size: three of ten 300 ms after the rest come too late
    late = [0.0, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006]
    assert wave(gatherer, scheduler, 13.0, late + [0.3, 0.301, 0.302], prefill_s=1.0) == [7, 3]
    # after a burst of two, ten whose last three come 80 ms after the first seven (1 ms apart): the tail ends 10 ms
    # after the seventh, within the window
    gatherer.open.requests = 2
    assert wave(gatherer, scheduler, 17.0, late + [0.086, 0.087, 0.088], prefill_s=1.0) == [7, 3]
