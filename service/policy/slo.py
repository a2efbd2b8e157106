"""The TPOT cap a step must respect (AdaSpec §5.3).

A request that gets only its bonus token from a step waits the whole step for one token, so a step longer than the
tightest TPOT target in the batch can break that request's SLO:  cap = min_r tpot_r over requests with a target.
"""

from __future__ import annotations

import math

from service.policy.types import BatchView


def step_time_cap(batch: BatchView) -> float:
    """Seconds the step may take; +inf when no request in the batch has a TPOT target."""
    cap = math.inf
    for r in batch.requests:
        if r.slo is not None and r.slo.tpot_s is not None:
            if r.slo.tpot_s <= 0:
                raise ValueError(f"request {r.request_id!r}: TPOT target must be positive, got {r.slo.tpot_s}")
            cap = min(cap, r.slo.tpot_s)
    return cap


def score(tokens: float, step_s: float, cap: float) -> float:
    """Tokens per second, or a negative score for a step over the cap (the paper's -1; we use -step/cap so that
    shaving time off an over-cap step still counts as progress and trimming continues until the cap holds)."""
    if step_s > cap:
        return -step_s / cap
    return tokens / step_s
