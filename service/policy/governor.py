"""MoE-SpeQ's speculative governor: the draft length on the amortization roofline.

k_accept(k) = Σ_{i<=k} Π_{j<=i} p_j                 (p_j: EMA of per-position acceptance)
T_cycle(k)  = max(T_draft(k), T_pcie_init) + T_pcie_new(k) + T_verify(k + 1)
Θ(k)        = (1 + k_accept(k)) / T_cycle(k)         (the paper counts k_accept only; we count the bonus token
                                                      too, so k = 0, plain decode, is a comparable choice)
k*          = argmax_{0 <= k <= k_max} Θ(k),   k_max = the largest k with T_cycle(k) <= TPOT target
              (a cycle that yields only its bonus token must still meet the target), capped by k_limit
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CycleCosts:
    draft: Callable[[int], float]  # seconds to draft k tokens
    pcie_init: float  # seconds of expert transfer that drafting can hide
    pcie_new: Callable[[int], float]  # seconds of transfer for experts first needed by k drafts (not hidden)
    verify: Callable[[int], float]  # seconds to verify n tokens

    def cycle(self, k: int) -> float:
        return max(self.draft(k), self.pcie_init) + self.pcie_new(k) + self.verify(k + 1)


def accepted_drafts(p: Sequence[float], k: int) -> float:
    """k_accept(k); positions beyond len(p) reuse the last estimate."""
    total, run = 0.0, 1.0
    for i in range(k):
        run *= p[min(i, len(p) - 1)] if p else 0.0
        total += run
    return total


def slo_k_max(costs: CycleCosts, tpot_s: float | None, k_limit: int) -> int:
    """Largest k <= k_limit whose cycle fits the TPOT target (0 when even plain decode does not)."""
    if k_limit < 0:
        raise ValueError(f"k_limit must be >= 0, got {k_limit}")
    if tpot_s is None or math.isinf(tpot_s):
        return k_limit
    best = 0
    for k in range(k_limit + 1):
        if costs.cycle(k) <= tpot_s:
            best = k
    return best


def best_k(p: Sequence[float], costs: CycleCosts, tpot_s: float | None = None, k_limit: int = 7) -> int:
    """k* on the roofline within the SLO-derived bound."""
    k_max = slo_k_max(costs, tpot_s, k_limit)
    return max(range(k_max + 1), key=lambda k: ((1.0 + accepted_drafts(p, k)) / costs.cycle(k), -k))
