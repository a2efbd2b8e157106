"""Per-request, per-position acceptance estimates learnt from verify outcomes.

Acceptance is causal: draft position i is judged only when positions 1..i-1 were accepted. So one verify with k
drafts and a accepted tokens says "accepted" for positions 1..a and "rejected" for position a+1 (if a < k).
p_i is an EMA of those outcomes, i.e. P(accept i | accepted 1..i-1). New requests start from a batch-wide EMA.
Drafts trimmed before verification are judged by the drafter's confidence instead (`nudge`).
A position seen fewer than `trust` times leans on the position before it (acceptance changes slowly with depth),
so a policy that never tried deep drafts does not keep a stale prior for them forever.

  expected emitted tokens  e(K) = 1 + Σ_{i=1..K} Π_{j<=i} p_j
"""

from __future__ import annotations

import copy


def expected_tokens(p: list[float], k: int) -> float:
    """e(K): tokens a step emits on average with K drafts (the +1 is the bonus/correction token)."""
    total, run = 1.0, 1.0
    for i in range(k):
        run *= p[i] if i < len(p) else p[-1]
        total += run
    return total


class _Estimate:
    """EMA and observation count per draft position."""

    def __init__(self, values: list[float], prior_weight: float = 0.5) -> None:
        self.ema = list(values)  # P(accept i | reached i), smoothed
        self.seen = [0.0] * len(values)  # outcomes folded in, capped at the trust level
        self.prior_weight = prior_weight  # outcomes the starting values count as in the running mean
        self._blended: list[float] | None = None  # cache of `blended`, dropped on every add

    def add(self, i: int, outcome: float, alpha: float, trust: float) -> None:
        # a running mean over the first outcomes in which the starting values count as `prior_weight` outcomes, then
        # an EMA (AcceptanceTracker's `prior_weight`)
        self._blended = None
        weight = max(alpha, 1.0 / (self.seen[i] + 1.0 + self.prior_weight))
        self.ema[i] += weight * (outcome - self.ema[i])
        self.seen[i] = min(self.seen[i] + 1.0, trust)

    def blended(self, trust: float) -> list[float]:
        """Estimates with thinly observed positions leaning on the one before; callers must not mutate it."""
        if self._blended is None:
            out: list[float] = []
            for i, (value, seen) in enumerate(zip(self.ema, self.seen, strict=True)):
                w = seen / trust
                out.append(value if i == 0 else w * value + (1.0 - w) * out[-1])
            self._blended = out
        return self._blended


class AcceptanceTracker:
    def __init__(
        self,
        max_positions: int,
        prior: float = 0.5,
        alpha: float = 0.1,
        prior_alpha: float = 0.02,
        trust: int = 8,
        prior_weight: float = 0.5,
    ) -> None:
        if (
            max_positions < 1
            or not 0 <= prior <= 1
            or not 0 < alpha <= 1
            or not 0 < prior_alpha <= 1
            or trust < 1
            or prior_weight < 0
        ):
            raise ValueError(
                "need max_positions >= 1, prior in [0, 1], alphas in (0, 1], trust >= 1, prior_weight >= 0"
            )
        self.max_positions = max_positions  # draft positions tracked
        self.alpha = alpha  # weight of one outcome in a request's estimate
        self.prior_alpha = prior_alpha  # weight of one outcome in the batch-wide prior
        self.trust = float(trust)  # outcomes after which a position's own EMA is used alone
        # outcomes the batch-wide prior counts as in a new request's own estimate. At half an outcome (the default) a
        # request leaves it within a step or two: requests differ (arithmetic and prose on one model, 1.5 vs 2.9
        # tokens per verify). moe-serve weighs it as 2: a request's first output tokens are its draft's hardest, and
        # at half an outcome prose requests whose first two judged tokens were rejected fell to a fifth of the prior
        # and were mostly judged again 14 steps later, then found their drafts accepted whole (CPU engine,
        # STANDALONE, moe-fine x48, batch 1). At 2, moe-serve's TPOT on prose read 0.90-0.98 of the half-outcome
        # prior's in seven of eight cells over two runs with both drafters (1.01 in one), code and arithmetic at
        # batch 8 with the draft model 1.01-1.04, every cell's rounds overlapping (bench/results/judge-root-s68,
        # runs 7-8)
        self.prior_weight = prior_weight
        self._prior = _Estimate([prior] * max_positions)
        self._per_request: dict[str, _Estimate] = {}

    @property
    def prior(self) -> list[float]:
        """Batch-wide P(accept i | reached i), what a new request starts from."""
        return self._prior.blended(self.trust)

    def prior_trusted(self) -> bool:
        """Whether the batch-wide prior rests on `trust` outcomes of first drafts (not on the configured guess)."""
        return self._prior.seen[0] >= self.trust

    def _estimate(self, request_id: str) -> _Estimate:
        est = self._per_request.get(request_id)
        if est is None:
            est = self._per_request[request_id] = _Estimate(list(self.prior), self.prior_weight)
        return est

    def observed(self, request_id: str) -> float:
        """Outcomes of first drafts folded into the request's own estimate (capped at `trust`; 0 if it has none)."""
        est = self._per_request.get(request_id)
        return 0.0 if est is None else est.seen[0]

    def get(self, request_id: str) -> list[float]:
        return self._estimate(request_id).blended(self.trust)

    def update(self, request_id: str, k: int, accepted: int) -> None:
        est = self._estimate(request_id)
        for i in range(min(k, accepted + 1, self.max_positions)):
            outcome = 1.0 if i < accepted else 0.0
            est.add(i, outcome, self.alpha, self.trust)
            self._prior.add(i, outcome, self.prior_alpha, self.trust)

    def if_matched(self, request_id: str, tokens: int, depth: int) -> list[float]:
        """The request's estimates as they would read were a judgement over `tokens` emitted tokens to find every
        one matched: chains of `depth` drafts accepted to their ends, each next one rooted after the previous one's
        bonus token (as moe_sglang/draft_model.py replays a judgement), the last cut where the tokens end. Nothing
        is changed."""
        est = copy.deepcopy(self._estimate(request_id))
        while tokens > 0 and depth > 0:
            run = min(depth, tokens, self.max_positions)
            for i in range(run):
                est.add(i, 1.0, self.alpha, self.trust)
            tokens -= depth + 1
        return est.blended(self.trust)

    def nudge(self, request_id: str, position: int, confidence: float) -> None:
        """Move p at 0-based `position` toward a drafter confidence, for drafts that were trimmed before verify."""
        if 0 <= position < self.max_positions:
            self._estimate(request_id).add(position, confidence, self.alpha, self.trust)
            self._prior.add(position, confidence, self.prior_alpha, self.trust)

    def keep_only(self, request_ids: set[str]) -> None:
        """Forget finished requests."""
        for rid in [r for r in self._per_request if r not in request_ids]:
            del self._per_request[rid]

    def __len__(self) -> int:
        return len(self._per_request)
