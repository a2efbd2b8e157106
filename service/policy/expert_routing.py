"""Expert reuse learnt from measured verifies, per batch-size bucket (cost_model.py's module docstring): the affinity
of a request's next verify token to its previous token's experts, and its split by outcome (accepted drafts route
like the target's own next token, rejected ones do not)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


class SplitAffinity:
    """Fresh routings per accepted and per rejected draft, (1 - a_acc, 1 - a_rej), by least squares over the latest
    `window` verify steps: fresh - B = A·u_acc + R·u_rej for A accepted and R rejected drafts (R counts the drafts
    after the first rejection too), each u kept in [0, 1]. An accepted draft is a token the target emits, so u_acc
    is pulled toward 0 (its own next token's routing) with the weight of `accepted_prior` accepted drafts squared
    (default: two steps of three accepted drafts): where drafts are mostly rejected (code and arithmetic at batch 1
    on the CPU engine) the few accepted ones cannot pin u_acc, and unpinned it came out at 1.0 (every accepted draft
    priced as fresh experts, 2.1x a plain step for K = 1), so no prose request that followed at batch 1 ever
    speculated (STANDALONE prose b1 1.05x of none, static-3 0.74x). Needs `min_steps` steps before it answers, and
    steps of both kinds where the prior is off (`accepted_prior=0`)."""

    def __init__(self, window: int = 64, min_steps: int = 4, accepted_prior: float = 18.0) -> None:
        if accepted_prior < 0:
            raise ValueError(f"accepted_prior must be >= 0, got {accepted_prior}")
        self._rows: deque[tuple[float, float, float]] = deque(maxlen=window)
        self._min_steps = min_steps
        self._accepted_prior = accepted_prior
        self._fit: tuple[float, float] | None = None
        self._stale = False

    def add(self, accepted: float, rejected: float, fresh_drafts: float) -> None:
        if accepted < 0 or rejected < 0 or accepted + rejected <= 0:
            return
        self._rows.append((float(accepted), float(rejected), float(fresh_drafts)))
        self._stale = True

    def fresh_per_draft(self) -> tuple[float, float] | None:
        """(u_acc, u_rej), or None while the steps seen cannot tell them apart."""
        if self._stale:
            self._stale, self._fit = False, self._solve()
        return self._fit

    def _solve(self) -> tuple[float, float] | None:
        if len(self._rows) < self._min_steps:
            return None
        aa = sum(a * a for a, _, _ in self._rows) + self._accepted_prior
        ar = sum(a * r for a, r, _ in self._rows)
        rr = sum(r * r for _, r, _ in self._rows)
        ay = sum(a * y for a, _, y in self._rows)
        ry = sum(r * y for _, r, y in self._rows)
        det = aa * rr - ar * ar
        if det <= 1e-6 * max(aa * rr, 1e-12):
            return None  # every step accepted the same share of its drafts: the two cannot be told apart
        u_acc = (ay * rr - ry * ar) / det
        u_rej = (ry * aa - ay * ar) / det
        if u_acc < 0 or u_rej < 0:  # the constrained optimum lies on an edge: one u at 0, the other refitted alone
            u_acc, u_rej = (0.0, ry / rr) if u_acc < 0 else (ay / aa, 0.0)
        return min(max(u_acc, 0.0), 1.0), min(max(u_rej, 0.0), 1.0)


def batch_bucket(requests: int) -> int:
    """The batch-size bucket routing is learnt in: 1 for one request, 2 for 2-3, 3 for 4-7, 4 for 8-15, ..."""
    return max(int(requests), 1).bit_length()


@dataclass
class Routing:
    """Expert reuse measured in the verifies of one batch-size bucket (module docstring)."""

    affinity: float = 0.0  # P(a request's next verify token reuses its previous token's experts)
    steps: int = 0  # measured steps with drafts the affinity has learnt from
    split: SplitAffinity = field(default_factory=SplitAffinity)  # by outcome: accepted, rejected
