"""`static`: the same draft length for every request, every step (the baseline most engines ship).

Rule: K_r = min(k, max_k) for every request r; verify_len_r = K_r. With `draft_stop` (off by default, so that
"static K" stays the baseline engines ship) a drafter that drafts depth by depth stops each chain at its first draft
below draft_stop x its runner-up's probability (Decision.draft_stop), and with `accept_stop` at its first draft whose
predicted acceptance is below it where the drafter has an acceptance head (Decision.accept_stop).
"""

from __future__ import annotations

from service.policy.base import plan
from service.policy.types import BatchView, Decision, StepStats


class StaticPolicy:
    def __init__(self, k: int = 3, draft_stop: float = 0.0, accept_stop: float = 0.0) -> None:
        if k < 0:
            raise ValueError(f"static k must be >= 0, got {k}")
        if draft_stop != 0 and draft_stop < 1:
            raise ValueError(f"static draft_stop must be 0 (off) or >= 1, got {draft_stop}")
        if not 0 <= accept_stop < 1:
            raise ValueError(f"static accept_stop must be a probability in [0, 1) (0: off), got {accept_stop}")
        self.k = k  # draft tokens per request per step
        self.draft_stop = draft_stop  # Decision.draft_stop
        self.accept_stop = accept_stop  # Decision.accept_stop

    def decide(self, batch: BatchView) -> Decision:
        ks = [self.k] * len(batch.requests)
        return plan(batch, ks, draft_stop=self.draft_stop, accept_stop=self.accept_stop)

    def trim(self, batch: BatchView, decision: Decision) -> Decision:
        return decision

    def observe(self, stats: StepStats) -> None:
        return None
