"""Requests that reach an idle engine as one burst are prefilled together: where the engine's recent arrivals came in
bursts, an idle scheduler keeps receiving until as many requests as the last burst brought have arrived, or for at most
the setting `arrival_gather_ms` (250 ms), before it plans the prefill; otherwise it keeps receiving while requests
keep coming a short quiet gap apart (5 % of its last prefill, below).

Why: a client that sends several requests at once (a batch of prompts, a gateway relaying a burst, every wave of the
benchmarks) reaches SGLang's scheduler one request at a time (each passes the HTTP server and the tokenizer manager
in turn; a burst of 8 from a thread pool spread over 20-80 ms here, the first gap the longest, and up to 156 ms on
moe-fine x48 engines in the thirty-ninth session, where a 100 ms window split waves 6 + 2, 3 + 5, 4 + 4). An idle
scheduler plans a prefill with whatever has arrived when it looks, so it prefills the first request alone and the
rest of the burst one prefill later, while the first request, its first token already sent, waits for that second
prefill before its next token. Seen in the engine logs of the deciding benchmark's batch-8 waves without this
(moe-fine x48, 2026-11-29):
`Prefill batch, #new-seq: 1` then `#new-seq: 7` ~1.5 s later, which a request's time per output token (TPOT, after its
first token) carries: 1.5 s over 31 tokens is 48 ms per token for the first request, ~6 ms on the wave's mean, most of
the distance between a synchronous engine's batch-8 TPOT and that of SGLang's overlap scheduler, which sends a first
token only after the next batch has run (so that wait lands in its TTFT instead). Prefilled together, the burst's first
request waits for the others' prefill before its first token instead of after it (its time to the last token does not
grow), the others do not wait for its prefill, and the expert weights are read by one prefill instead of two.

The rule learns from what arrives, so that a request arriving alone does not wait for company that never comes: each
arrival at an idle engine opens an observation of the requests that follow it while the engine is still prefilling
(before its first step that is not a prefill) or within the window (`arrival_gather_ms`); the next one closes it. (A
burst can trickle in over more than one prefill: a wave of 8 on a slow 2-core host, fifty-fourth session, was
prefilled 1, 1 and 6 (received 0.13, 0.23 and 0.90 s after the first was sent); counted only up to the first receive
after the first prefill, as before, it read 2 and the next wave was prefilled 2 + 2 + 4: bench/results/sync-b8-s54.)
Where the last observation was a burst (more than one request), an idle arrival waits until the burst's size is
reached or the window has passed (the spread of a burst varied from 20 to 80 ms between the benchmark's waves, so
the last one's says little about the next; much of that spread was the benchmark's client building an HTTP client
per request until the fifty-fourth session, bench/_load.py), and from there on while its requests keep coming, each
within twice the longest gap between the requests it has brought so far, or 10 ms where 5 % of the last prefill is
longer, within the window: a burst larger than the last one is not cut at the last one's size. Seen in the trace
replay (seventy-first session, 2-core AMD EPYC with AVX2, `bench.run_all --only replay`): the Mooncake window's ten
simultaneous requests, at an engine whose last burst had brought two (the window's two later arrivals, or Azure's
last), were received until two had come and prefilled in two groups (2 + 8, 4 + 6, 3 + 7, ...) in 29 of the
synchronous engines' 34 replays (SGLang's overlap loop, `none`, in 1 of 4), the first group's second token waiting
for the second group's prefill (first intervals of 1.5-5.1 s there). Otherwise (the last arrival was lone, or none was
observed) it waits only while requests keep coming, each within a quiet gap of `QUIET_SHARE` (5 %) of the engine's
last prefill after an idle arrival (measured: from the receive that planned it to the next, so planning, forward and
result), at most the window. Why: a burst after lone requests (the first wave after a benchmark's batch-1 cell, a
client's batch after a quiet spell) was split as an engine's first burst is: 1 + 7 or 2 + 6 in every synchronous
engine's log, the first wave of each batch-8 cell of the deciding benchmark (bench/results/math-b8-s53). A split
costs the burst's first request a whole prefill between its first and second token and the others the first's
prefill before their first; the gap costs a lone request 5 % of a prefill in TTFT, so waiting pays wherever more
than about one idle arrival in twenty starts a burst. The share is sized from what reached the scheduler: a wave's
requests 0.4-7.6 ms apart (the second 7.6 ms after the first in one; bench/results/sync-b8-s54 and arrival-quiet-s55),
where lone requests of moe-fine x48 (prompts of up to 128 tokens) had their first token 0.33-0.76 s after they were
sent on a 2-core AMD EPYC (2 % split such waves 1 + 7 and 3 + 5: bench/results/arrival-quiet-s55). Where prefills
take milliseconds (moe-tiny) the gap is shorter than a poll and nobody waits. A busy engine (requests running, queued
or just prefilled) receives as before, once per scheduler iteration, and so never delays a running request's tokens.

Why a hook (touchpoints.py): SGLang's scheduler has no mechanism for waiting on arrivals on this path: its
`PrefillDelayer` holds prefills back for data-parallel attention ranks and requires the overlap scheduler, which
moe-serve's speculative engines do not run (algorithm.py). `Scheduler.ingest_requests` is the one place its loops
receive input ("the one place a new per-iteration input source belongs", its docstring), so an around hook receives
again there while the burst is still arriving.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

from moe_sglang import plain_burst

logger = logging.getLogger(__name__)

TARGET = "sglang.srt.managers.scheduler.Scheduler.ingest_requests"
POLL_S = 0.0005  # between two receives while a burst is arriving
QUIET_SHARE = 0.05  # an arrival with no burst before it waits for company this share of the engine's last prefill
# once as many requests as the last burst have come, receiving goes on while the next comes within TAIL_GAPS times the
# longest gap between this burst's requests so far, and at least TAIL_MIN_S where QUIET_SHARE of the last prefill is
# longer (module docstring)
TAIL_GAPS = 2.0
TAIL_MIN_S = 0.010
GATHERED = "arrival gather: prefilling a burst together"  # the engine log's line, once


@dataclass
class Burst:
    """What followed one arrival at an idle engine while it prefilled or within the window: requests in all."""

    start: float
    requests: int
    followed: bool = False  # the scheduler has received once since (after the first request's prefill)
    decoded: bool = False  # the engine has run a step other than a prefill since
    received: float | None = None  # when the idle receive that opened it returned (its prefill was planned)


class Gatherer:
    """The around hook of `Scheduler.ingest_requests` (see the module docstring)."""

    def __init__(self, window_ms: float, clock=time.perf_counter, sleep=time.sleep) -> None:
        if window_ms <= 0:
            raise ValueError(f"arrival gather window must be > 0 ms, got {window_ms}")
        self.window_s = window_ms / 1000
        self.clock, self.sleep = clock, sleep
        self.open: Burst | None = None  # the observation the last idle arrival opened
        self.last: Burst | None = None  # the one before, closed
        self.gathered = 0  # idle arrivals that waited and prefilled more than one request (log, tests)
        self.scheduler = None  # the scheduler whose receives this hook wraps
        self.prefill_s = 0.0  # the last prefill after an idle arrival, measured (0 until one is)

    def __call__(self, original, scheduler, *args, **kwargs):
        if scheduler is not self.scheduler:  # the plain bursts' arrival probe watches the same input (plain_burst.py)
            self.scheduler = scheduler
            plain_burst.watch(scheduler)
        idle = _idle(scheduler)
        received = original(scheduler, *args, **kwargs)
        arrived = _generations(received)
        if not idle:
            self._follow(scheduler, arrived)
            return received
        if not arrived:
            return received
        now = self.clock()
        self.last = self.open if self.open is not None else self.last
        self.open = burst = Burst(now, arrived)
        received = list(received)
        if self.last is not None and self.last.requests > 1:
            expected, quiet_s = self.last.requests, self.window_s  # after a burst: until as many have come
        else:
            expected, quiet_s = None, min(self.window_s, QUIET_SHARE * self.prefill_s)  # while arrivals keep coming
        if expected is None and quiet_s < POLL_S:
            burst.received = self.clock()
            return received
        last_arrival, longest_gap = now, 0.0
        while self.clock() - burst.start < self.window_s:
            if expected is not None and burst.requests >= expected:
                # as many as the last burst: more may still be on their way (a larger burst), so receive on while
                # they come as close together as this burst's requests have
                floor_s = min(TAIL_MIN_S, QUIET_SHARE * self.prefill_s)
                quiet_s = min(self.window_s, max(floor_s, TAIL_GAPS * longest_gap))
            if self.clock() - last_arrival >= quiet_s:
                break
            self.sleep(POLL_S)
            more = original(scheduler, *args, **kwargs)
            if n := _generations(more):
                burst.requests += n
                arrival = self.clock()
                longest_gap, last_arrival = max(longest_gap, arrival - last_arrival), arrival
            received.extend(more)
        burst.received = self.clock()
        if burst.requests > 1:
            self.gathered += 1
            if self.gathered == 1:
                logger.info(
                    "%s (%d requests, received over %.1f ms; moe_sglang/arrival_gather.py)", GATHERED, burst.requests,
                    (self.clock() - burst.start) * 1e3,
                )  # fmt: skip
        return received

    def _follow(self, scheduler, arrived: int) -> None:
        """A receive at a busy engine (every scheduler iteration while requests run: kept to a few attribute reads):
        requests that arrived during the open burst's prefills (received at a receive right after a prefill, whenever
        they came: the scheduler only sees them then), before any other step, or within the window belong to the
        burst."""
        burst = self.open
        if burst is None or (burst.decoded and not arrived):
            return
        if not burst.followed and burst.received is not None and _prefilled(scheduler.last_batch):
            self.prefill_s = self.clock() - burst.received  # planning, the prefill forward, its result
        if not burst.decoded and _decoded(scheduler.last_batch):
            burst.decoded = True
        if arrived and (not burst.followed or not burst.decoded or self.clock() - burst.start <= self.window_s):
            burst.requests += arrived
        burst.followed = True


def _idle(scheduler) -> bool:
    """Nothing running, queued, just prefilled or half-prefilled: the next prefill is planned from what arrives now.
    (A request prefilled in the last iteration is in neither the queue nor the running batch until the next batch is
    planned: the last batch holds it.) Requests that have finished count as gone: SGLang drops them from its
    batches only when it plans the next one, so in the receive right after a batch's last step the running batch
    and the last batch still hold them, and a burst sent as soon as the previous one ended (a benchmark's next wave)
    would otherwise be received as a busy engine receives, prefilling whatever part of it has come in."""
    if scheduler.waiting_queue or scheduler.chunked_req is not None or scheduler._deferred_input_requests:
        return False
    return _finished(scheduler.last_batch) and _finished(scheduler.running_batch)


def _finished(batch) -> bool:
    """No batch, or every request of it finished."""
    return batch is None or batch.is_empty() or all(req.finished() for req in batch.reqs)


def _decoded(batch) -> bool:
    """Whether `batch`, the last iteration's, was a step other than a prefill (None: no step ran)."""
    return batch is not None and batch.forward_mode != _extend()


def _prefilled(batch) -> bool:
    """Whether `batch`, the last iteration's, was a prefill."""
    return batch is not None and batch.forward_mode == _extend()


@functools.cache
def _extend():
    """SGLang's prefill forward mode, imported once."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ForwardMode.EXTEND


def _generations(received) -> int:
    """How many generation requests `received` holds (a batch of them counts each)."""
    if not received:
        return 0
    single, batch = _request_types()
    return sum(1 if isinstance(item, single) else len(item) if isinstance(item, batch) else 0 for item in received)


@functools.cache
def _request_types() -> tuple[type, type]:
    """SGLang's generation request types, imported once (`_generations` runs at every scheduler iteration)."""
    from sglang.srt.managers.io_struct import BatchTokenizedGenerateReqInput, TokenizedGenerateReqInput

    return TokenizedGenerateReqInput, BatchTokenizedGenerateReqInput


def install(window_ms: float) -> Gatherer:
    from moe_sglang.touchpoints import hook

    gatherer = Gatherer(window_ms)
    hook(TARGET, gatherer, "around")
    return gatherer
