"""moe-serve's trim (the SpeculationPolicy step after drafting): the allocation re-run on the drafter's confidences.
A method of MoeServePolicy, kept apart by idea."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.policy.slo import step_time_cap
from service.policy.types import BatchView, Decision, RequestDecision

if TYPE_CHECKING:
    from service.policy.moe_serve import MoeServePolicy


def trim_to_confidences(self: MoeServePolicy, batch: BatchView, decision: Decision) -> Decision:
    """Re-run the allocation with the drafter's confidences for the drafted positions; drafting cost is sunk."""
    if not any(r.draft_confidences for r in batch.requests):
        return decision
    probs, caps = [], []
    for r, d in zip(batch.requests, decision.requests, strict=True):
        p = list(r.draft_confidences[: d.k]) + self.accept.get(r.request_id)[len(r.draft_confidences) : d.k]
        probs.append(p or [0.0])
        caps.append(d.k)
    lens = self.allocate(probs, caps, step_time_cap(batch), drafting=False, layout=batch)
    for i, (r, d) in enumerate(zip(batch.requests, decision.requests, strict=True)):
        if d.request_id in self._probing:
            lens[i] = d.k  # a probe exists to measure acceptance: verify it
        for pos in range(lens[i], min(d.k, len(r.draft_confidences))):
            self.accept.nudge(d.request_id, pos, r.draft_confidences[pos])
    return Decision(
        requests=tuple(RequestDecision(d.request_id, d.k, ln) for d, ln in zip(decision.requests, lens, strict=True)),
        expert_budget=decision.expert_budget,
        judge=decision.judge,
    )
