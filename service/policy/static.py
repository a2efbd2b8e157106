"""`static`: the same draft length for every request, every step (the baseline most engines ship).

Rule: K_r = min(k, max_k) for every request r; verify_len_r = K_r.
"""

from __future__ import annotations

from service.policy.base import plan
from service.policy.types import BatchView, Decision, StepStats


class StaticPolicy:
    def __init__(self, k: int = 3) -> None:
        if k < 0:
            raise ValueError(f"static k must be >= 0, got {k}")
        self.k = k  # draft tokens per request per step

    def decide(self, batch: BatchView) -> Decision:
        return plan(batch, [self.k] * len(batch.requests))

    def trim(self, batch: BatchView, decision: Decision) -> Decision:
        return decision

    def observe(self, stats: StepStats) -> None:
        return None
