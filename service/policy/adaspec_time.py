"""AdaSpec's step-time model: every forward is linear in batch tokens and context tokens (AdaSpec §4.1).

  T(k) = c0 + c1·verify_tokens + c2·context_tokens + c3·draft_steps + c4·draft_tokens
Fitted by least squares over a window of measured steps, pulled toward an offline-profiled prior where the data
cannot tell coefficients apart (a batch that always drafts the same way makes some features collinear).
"""

from __future__ import annotations

from collections import deque

from service.policy.least_squares import fit_nonnegative
from service.policy.types import StepStats


class LinearStepTime:
    def __init__(self, prior: tuple[float, float, float, float, float], window: int = 256, ridge: float = 1e-3) -> None:
        if len(prior) != 5:
            raise ValueError(
                "prior needs 5 coefficients: fixed, per verify token, per context token, per draft step, per draft token"
            )
        self.prior = tuple(prior)
        self.coef = tuple(prior)  # seconds: fixed, per verify token, per context token, per draft step, per draft token
        self.ridge = ridge
        self._rows: deque[tuple[list[float], float]] = deque(maxlen=window)

    def predict(self, verify_tokens: int, context_tokens: int, draft_steps: int, draft_tokens: int) -> float:
        c = self.coef
        return c[0] + c[1] * verify_tokens + c[2] * context_tokens + c[3] * draft_steps + c[4] * draft_tokens

    def add(self, stats: StepStats) -> None:
        ks = [r.k for r in stats.requests]
        features = [
            1.0,
            float(stats.verify_tokens),
            float(stats.context_tokens),
            float(stats.draft_steps),
            float(sum(ks)),
        ]
        self._rows.append((features, stats.step_s))

    def refit(self) -> None:
        if self._rows:
            self.coef = fit_nonnegative(self._rows, self.prior, self.ridge)
