"""MoE-SpeQ's three prefetch phases (§3.3.2) and the background thread that performs the fetches.

While the draft fills the Expert Lookahead Buffer token by token, after draft step `i` of `k`:
- Phase I, hit-first priming (first third of the window): fetch nothing. The predicted experts already resident are
  now "needed" in the buffer, so lookahead-aware eviction keeps them: free hits before any transfer is spent.
- Phase II, mid-window prefetch (middle steps): fetch the confident part of what the buffer predicts so far
  (confidence >= `min_confidence`), at most as many experts as the measured bandwidth can move during the drafting
  still to come; distant predictions are less certain, so the rest waits.
- Phase III, saturation before verify (last step): queue every predicted expert not yet resident, at the front,
  in verify order (layer by layer), so verify finds as many as the resident set can hold.
Prefetching goes on during verify (`on_verify_layer`). The thread drops queued keys the buffer no longer needs (verify passed their layer) and runs until `close`.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections import deque

from service.offload.expert_store import ExpertStore
from service.offload.lookahead import ExpertLookaheadBuffer
from service.offload.types import ExpertKey


class Phase(enum.Enum):
    PRIMING = 1
    MID_WINDOW = 2
    SATURATION = 3


def phase_for_step(step: int, k: int) -> Phase:
    """Phase after draft step `step` (1-based) of a `k`-token window."""
    if not 1 <= step <= k:
        raise ValueError(f"draft step must be in [1, {k}], got {step}")
    if step == k:
        return Phase.SATURATION
    return Phase.PRIMING if step <= max(1, k // 3) else Phase.MID_WINDOW


def mid_window_budget(steps_left: int, draft_step_s: float, bandwidth: float | None, expert_bytes: int) -> int:
    """Experts the slow tier can deliver while `steps_left` more draft steps run (at least 1)."""
    if bandwidth is None or bandwidth <= 0:
        return 1
    return max(1, math.floor(steps_left * draft_step_s * bandwidth / expert_bytes))


class Prefetcher:
    """One daemon thread fetching queued experts into the store; `busy_intervals` records when it was copying."""

    def __init__(self, store: ExpertStore, lookahead: ExpertLookaheadBuffer, min_confidence: float = 0.3):
        self.store = store
        self.lookahead = lookahead
        self.min_confidence = min_confidence
        self.busy_intervals: list[tuple[float, float]] = []  # perf_counter seconds (start, end) of each fetch
        self._queue: deque[ExpertKey] = deque()
        self._queued: set[ExpertKey] = set()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="expert-prefetch", daemon=True)
        self._thread.start()

    def on_draft_step(self, step: int, k: int, draft_step_s: float) -> Phase:
        """Plan after draft step `step` of `k` (the buffer already holds its row); returns the phase applied."""
        phase = phase_for_step(step, k)
        if phase is Phase.MID_WINDOW:
            stats = self.store.stats()
            budget = mid_window_budget(k - step, draft_step_s, stats.bandwidth, self.store.source.expert_bytes)
            keys = self._missing(self.lookahead.pending(range(0, step), self.min_confidence))
            self.submit(keys[:budget])
        elif phase is Phase.SATURATION:
            self.submit(self._missing(self.lookahead.pending()), front=True)
        return phase

    def on_verify_layer(self, layer: int) -> None:
        """Verify entered `layer`: layers behind it are done, so refill the queue with what lies beyond it.

        Keys the admission rule refused while earlier layers still needed their slots get a second chance here.
        """
        self.lookahead.advance(layer)
        self.submit(self._missing([key for key in self.lookahead.pending() if key[0] > layer]), front=True)

    def submit(self, keys: list[ExpertKey], *, front: bool = False) -> None:
        with self._cond:
            fresh = [key for key in keys if key not in self._queued]
            if not fresh:
                return  # waking the thread for nothing costs a GIL hand-off on every draft step and verify layer
            if front:
                self._queue.extendleft(reversed(fresh))
            else:
                self._queue.extend(fresh)
            self._queued.update(fresh)
            self._cond.notify_all()

    def cancel(self) -> None:
        """Drop everything queued (a new window starts); a fetch in progress completes."""
        with self._cond:
            self._queue.clear()
            self._queued.clear()

    def drain(self, timeout_s: float = 30.0) -> None:
        """Block until the queue is empty and no fetch is running."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError("prefetch queue did not drain")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def _missing(self, keys: list[ExpertKey]) -> list[ExpertKey]:
        resident = self.store.resident()
        return [key for key in keys if key not in resident]

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                key = self._queue.popleft()
                self._queued.discard(key)
                self._busy = True
            try:
                if self.lookahead.next_use(key) is not None:
                    start = time.perf_counter()
                    if self.store.prefetch(key):
                        self.busy_intervals.append((start, time.perf_counter()))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
