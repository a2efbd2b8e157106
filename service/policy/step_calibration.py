"""Calibration of the step-time model's speculative steps per batch-size bucket (cost_model.py's module docstring)."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable


class Calibration:
    """A batch-size bucket's latest speculative steps, and the median of measured / predicted step time over them
    (`ratio`) and the median absolute deviation of its log (`spread`), recomputed with the coefficients of each
    refit (module docstring). `due`: the bucket has just reached 4, 8 or 16 steps, so a refit would calibrate it:
    refits come every 16 steps, and in the CPU engine's STANDALONE code cell a batch-1 request verified one draft
    for 13 steps at 1.24x the price it was speculating on before the next one."""

    DUE_AT = frozenset((4, 8, 16))

    def __init__(self, predict: Callable[[tuple], float], window: int = 32, min_steps: int = 4) -> None:
        self._predict = predict  # step -> the uncalibrated model's seconds for it
        # (tokens, requests, draft_steps, draft_tokens, backlog_tokens, accepted drafts) and measured seconds
        self._steps: deque[tuple[tuple, float]] = deque(maxlen=window)
        self._min_steps = min_steps
        self._stale = False
        self._ratio, self._spread = 1.0, None
        self._added = 0  # steps added in all
        self.due = False

    def add(self, step: tuple, measured_s: float) -> None:
        if measured_s > 0:
            self._steps.append((step, measured_s))
            self._added += 1
            self.due = self.due or self._added in self.DUE_AT

    def refit(self) -> None:
        self._stale, self.due = bool(self._steps), False

    @property
    def ratio(self) -> float:
        """Measured / predicted, median; 1 until `min_steps` steps were measured."""
        self._update()
        return self._ratio

    @property
    def spread(self) -> float | None:
        """MAD of log(measured / predicted); None until `min_steps` steps were measured."""
        self._update()
        return self._spread

    def _update(self) -> None:
        if not self._stale:
            return
        self._stale = False
        logs = [math.log(m / t) for step, m in self._steps if (t := self._predict(step)) > 0]
        if len(logs) >= self._min_steps:
            centre = statistics.median(logs)
            self._ratio, self._spread = math.exp(centre), statistics.median(abs(x - centre) for x in logs)
