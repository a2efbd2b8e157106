"""No-speculation step time per batch size, the denominator of Cascade's utility (Cascade §5.3).

Measured on steps where every request ran plain decode; a batch size never measured borrows the nearest measured
one (decode step time changes slowly with batch size at the small batches where this matters).
"""

from __future__ import annotations


class BaselineTimes:
    def __init__(self, alpha: float = 0.3) -> None:
        self.alpha = alpha  # weight of a new measurement
        self._by_batch: dict[int, float] = {}  # batch size -> seconds per plain-decode step
        self.measured = 0  # plain-decode steps seen
        self.last_step = -1  # step index of the newest measurement

    def add(self, batch_size: int, step_s: float, step_index: int) -> None:
        if step_s <= 0:
            raise ValueError(f"step time must be positive, got {step_s}")
        old = self._by_batch.get(batch_size)
        self._by_batch[batch_size] = step_s if old is None else old + self.alpha * (step_s - old)
        self.measured += 1
        self.last_step = step_index

    def get(self, batch_size: int) -> float | None:
        """Seconds per plain-decode step at this batch size, or None before any measurement."""
        if batch_size in self._by_batch:
            return self._by_batch[batch_size]
        if not self._by_batch:
            return None
        nearest = min(self._by_batch, key=lambda b: (abs(b - batch_size), b))
        return self._by_batch[nearest]
