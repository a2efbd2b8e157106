"""Trace arrivals for locust, without importing locust (which monkey-patches the process with gevent).

`TraceClock` hands schedule entries out in arrival order with their absolute due times, so whichever locust user is
free fires the next request at its trace time (open loop, as in service/traces/replay.py). `users_needed` sizes the
user pool: the most requests that arrive within any `e2e_guess_s` span up to time t, so a pool of that size can keep
every request on time if each takes at most `e2e_guess_s`. It never shrinks, because locust stops surplus users
mid-request.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable, Sequence


class TraceClock:
    """Hands out (index, due monotonic time) in arrival order; the clock starts at the first take()."""

    def __init__(self, arrivals_s: Sequence[float], lead_s: float = 0.05, now: Callable[[], float] = time.monotonic):
        self._arrivals = list(arrivals_s)
        self._lead_s = lead_s
        self._now = now
        self._next = 0
        self.start: float | None = None  # monotonic seconds of the schedule's time 0

    def take(self) -> tuple[int, float] | None:
        if self._next >= len(self._arrivals):
            return None
        if self.start is None:
            self.start = self._now() + self._lead_s
        index = self._next
        self._next += 1
        return index, self.start + self._arrivals[index]


class PoolSize:
    """users_needed(t) for a schedule: see the module docstring."""

    def __init__(self, arrivals_s: Sequence[float], e2e_guess_s: float, lookahead_s: float = 1.0):
        if e2e_guess_s <= 0:
            raise ValueError(f"e2e guess must be > 0 s, got {e2e_guess_s}")
        self._arrivals = list(arrivals_s)
        self._lookahead_s = lookahead_s
        running, self._prefix_max = 0, []
        for j, a in enumerate(self._arrivals):
            in_span = j + 1 - bisect_right(self._arrivals, a - e2e_guess_s)  # arrivals in (a - e2e, a]
            running = max(running, in_span)
            self._prefix_max.append(running)

    def users_needed(self, t_s: float) -> int:
        seen = bisect_right(self._arrivals, t_s + self._lookahead_s)
        return max(1, self._prefix_max[seen - 1]) if seen else 1

    @property
    def last_arrival_s(self) -> float:
        return self._arrivals[-1] if self._arrivals else 0.0
