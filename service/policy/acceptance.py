"""Per-request, per-position acceptance estimates learnt from verify outcomes.

Acceptance is causal: draft position i is judged only when positions 1..i-1 were accepted. So one verify with k
drafts and a accepted tokens says "accepted" for positions 1..a and "rejected" for position a+1 (if a < k).
p_i is an EMA of those outcomes, i.e. P(accept i | accepted 1..i-1). New requests start from a batch-wide EMA. Drafts trimmed before verification are judged by
the drafter's confidence instead (`nudge`).

  expected emitted tokens  e(K) = 1 + Σ_{i=1..K} Π_{j<=i} p_j
"""

from __future__ import annotations


def expected_tokens(p: list[float], k: int) -> float:
    """e(K): tokens a step emits on average with K drafts (the +1 is the bonus/correction token)."""
    total, run = 1.0, 1.0
    for i in range(k):
        run *= p[i] if i < len(p) else p[-1]
        total += run
    return total


class AcceptanceTracker:
    def __init__(self, max_positions: int, prior: float = 0.5, alpha: float = 0.25, prior_alpha: float = 0.02) -> None:
        if max_positions < 1 or not 0 <= prior <= 1 or not 0 < alpha <= 1 or not 0 < prior_alpha <= 1:
            raise ValueError("need max_positions >= 1, prior in [0, 1], alphas in (0, 1]")
        self.max_positions = max_positions  # draft positions tracked
        self.alpha = alpha  # weight of one outcome in a request's estimate
        self.prior_alpha = prior_alpha  # weight of one outcome in the batch-wide prior
        self.prior = [prior] * max_positions  # batch-wide P(accept i | reached i)
        self._per_request: dict[str, list[float]] = {}

    def get(self, request_id: str) -> list[float]:
        p = self._per_request.get(request_id)
        if p is None:
            p = self._per_request[request_id] = list(self.prior)
        return p

    def update(self, request_id: str, k: int, accepted: int) -> None:
        p = self.get(request_id)
        for i in range(min(k, accepted + 1, self.max_positions)):
            outcome = 1.0 if i < accepted else 0.0
            p[i] += self.alpha * (outcome - p[i])
            self.prior[i] += self.prior_alpha * (outcome - self.prior[i])

    def nudge(self, request_id: str, position: int, confidence: float) -> None:
        """Move p at 0-based `position` toward a drafter confidence, for drafts that were trimmed before verify
        (otherwise positions a policy stops verifying would keep their stale prior forever)."""
        if 0 <= position < self.max_positions:
            p = self.get(request_id)
            p[position] += self.alpha * (confidence - p[position])
            self.prior[position] += self.prior_alpha * (confidence - self.prior[position])

    def keep_only(self, request_ids: set[str]) -> None:
        """Forget finished requests."""
        for rid in [r for r in self._per_request if r not in request_ids]:
            del self._per_request[rid]

    def __len__(self) -> int:
        return len(self._per_request)
