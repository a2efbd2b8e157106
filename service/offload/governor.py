"""Measurements → MoE-SpeQ's amortization-roofline k* (issue 10 part 3); the rule itself is service/policy/governor.py.

What this file measures, per cycle (CycleStats), as exponential moving averages:
- draft(k)    = k · t_draft_token                       (INT4 experts resident, so drafting is linear in k)
- verify(n)   = a + b·n, least squares over recent verify compute times (verify wall time minus its stalls)
- pcie_init   = S_expert / B                             (one expert transfer, the first fetch drafting can hide)
- pcie_new(k) = m · L · N(k+1) · S_expert / B            N(t) = E(1 − (1 − top_k/E)^t), MoESD's expected distinct
                                                         experts per layer for t tokens; m = measured share of verify
                                                         lookups that had to wait (misses + late prefetches)
- p_i         = P(draft i accepted | 1..i-1 accepted), positions never judged reuse the deepest judged one
B is the measured slow-tier bandwidth. Slow fetch makes every extra expert a draft brings in expensive, so k* falls
unless acceptance stays high enough to amortize the transfers (the roofline's point).
"""

from __future__ import annotations

from collections import deque

from service.offload.types import CycleStats
from service.policy.governor import CycleCosts, best_k
from service.policy.least_squares import fit


def expected_distinct_experts(tokens: int, num_experts: int, top_k: int) -> float:
    """MoESD: N(t) = E · (1 − (1 − k/E)^t) distinct experts per layer among `tokens` tokens routed uniformly."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


class OffloadGovernor:
    def __init__(
        self,
        num_layers: int,
        num_experts: int,
        top_k: int,
        expert_bytes: int,
        *,
        resident_fraction: float,
        k_limit: int = 6,
        initial_k: int = 2,
        tpot_s: float | None = None,
        alpha: float = 0.3,
        prior_accept: float = 0.7,
    ):
        if not 0 <= initial_k <= k_limit:
            raise ValueError(f"need 0 <= initial_k <= k_limit, got {initial_k}, {k_limit}")
        self.num_layers, self.num_experts, self.top_k = num_layers, num_experts, top_k
        self.expert_bytes = expert_bytes
        self.k_limit, self.initial_k, self.tpot_s, self.alpha = k_limit, initial_k, tpot_s, alpha
        # p_i per draft position, grown as deeper positions are judged; deeper ones reuse the last (policy.governor
        # does that), so a depth never tried does not keep a stale prior
        self.accept = [prior_accept]
        self.miss_share = 1.0 - resident_fraction  # prior: a lookup misses as often as the set is small
        self.draft_token_s: float | None = None  # seconds per draft token
        self.bandwidth: float | None = None  # bytes per second from the slow tier
        self._verify: deque[tuple[int, float]] = deque(maxlen=32)  # (tokens verified, compute seconds)

    def observe(self, cycle: CycleStats) -> None:
        if cycle.k > 0:
            self.draft_token_s = self._ema(self.draft_token_s, cycle.draft_s / cycle.k)
            for i in range(min(cycle.k, cycle.accepted + 1)):
                if i == len(self.accept):
                    self.accept.append(self.accept[-1])
                self.accept[i] += self.alpha * (float(i < cycle.accepted) - self.accept[i])
        self._verify.append((cycle.k + 1, max(0.0, cycle.verify_s - cycle.verify.stall_s)))
        if cycle.window.bandwidth is not None:
            self.bandwidth = self._ema(self.bandwidth, cycle.window.bandwidth)
        if cycle.verify.requests:
            waited = (cycle.verify.misses + cycle.verify.late_hits) / cycle.verify.requests
            self.miss_share += self.alpha * (waited - self.miss_share)

    def costs(self) -> CycleCosts | None:
        """The roofline's cost terms from what was measured; None until draft time and bandwidth are known."""
        if self.draft_token_s is None or self.bandwidth is None or not self._verify:
            return None
        fetch_s = self.expert_bytes / self.bandwidth
        draft_token_s = self.draft_token_s
        a, b = self._verify_line()

        def pcie_new(k: int) -> float:
            distinct = expected_distinct_experts(k + 1, self.num_experts, self.top_k)
            return self.miss_share * self.num_layers * distinct * fetch_s

        return CycleCosts(
            draft=lambda k: k * draft_token_s,
            pcie_init=fetch_s,
            pcie_new=pcie_new,
            verify=lambda n: max(0.0, a + b * n),
        )

    def choose_k(self) -> int:
        costs = self.costs()
        return self.initial_k if costs is None else best_k(self.accept, costs, self.tpot_s, self.k_limit)

    def _verify_line(self) -> tuple[float, float]:
        """verify(n) = a + b·n; flat at the mean until two different n were seen; b is kept >= 0."""
        sizes = {n for n, _ in self._verify}
        mean = sum(t for _, t in self._verify) / len(self._verify)
        if len(sizes) < 2:
            return mean, 0.0
        a, b = fit([[1.0, float(n)] for n, _ in self._verify], [t for _, t in self._verify])
        return (a, b) if b >= 0 else (mean, 0.0)

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.alpha * (new - old)
