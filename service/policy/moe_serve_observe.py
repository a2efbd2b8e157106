"""What moe-serve learns from each step (moe_serve.py's module docstring: drafts, reuse, and the cost model's refits):
functions of the policy, bound as its methods."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.policy.types import StepStats

if TYPE_CHECKING:
    from service.policy.cost_model import StepTimeModel
    from service.policy.moe_serve import MoeServePolicy

# steps after which the cost model is refitted besides every `refit_every`: the prior's scale is a GPU's, so the
# first measured steps replace it at once (a CPU step takes 5-20x what it predicts); likewise when a batch size's
# speculative steps can first be calibrated (StepTimeModel.calibration_due)
WARM_UP_REFITS = frozenset((1, 2, 4, 8))


def observe(self: MoeServePolicy, stats: StepStats) -> None:
    for r in stats.requests:
        if r.k > 0:
            self.accept.update(r.request_id, r.k, r.accepted)
            if r.request_id in self._depth:
                self.by_depth.update(depth_key(self._depth[r.request_id]), r.k, r.accepted)
        if r.expert_reuse is not None:  # a mean at first, then an EMA over about ten tokens
            mean, n = self._reuse.get(r.request_id, (0.0, 0))
            self._reuse[r.request_id] = (mean + max(1.0 / (n + 1), 0.1) * (r.expert_reuse - mean), n + 1)
    for shadow in stats.shadow:
        self.accept.update(shadow.request_id, shadow.k, shadow.accepted)
        if shadow.request_id in self._depth:  # a draft in hand (NGRAM), not a judgement asked for
            self.by_depth.update(depth_key(shadow.draft_depth), shadow.k, shadow.accepted)
            self._shadowed.add(shadow.request_id)
    self.model.add(
        stats.verify_tokens,
        stats.batch_size,
        stats.unique_experts,
        stats.draft_steps,
        sum(r.k for r in stats.requests),
        stats.verify_s,
        stats.draft_s,
        stats.other_s,
        stats.plain,
        stats.draft_backlog_tokens,
        sum(r.accepted for r in stats.requests),
        fresh_accepted(self, stats.requests),
    )
    self._steps += 1
    warming = self.warm_up and (self._steps in WARM_UP_REFITS or self.model.calibration_due())
    if self._steps % self.refit_every == 0 or warming:
        self.model.refit()


def drafted_probs(self: MoeServePolicy, request_id: str, depth: int) -> list[float]:
    """p of a request whose draft is in hand (moe_serve.py's module docstring, drafts)."""
    by_depth = self.by_depth.get(depth_key(depth))
    seen = self.accept.observed(request_id)
    if seen == 0:
        return [0.0] * len(by_depth) if self.judged_first else by_depth
    w = seen / (seen + 2.0)
    return [w * own + (1.0 - w) * d for own, d in zip(self.accept.get(request_id), by_depth, strict=True)]


def fresh_accepted(self: MoeServePolicy, reqs) -> float | None:
    """Fresh routings per accepted draft of these requests (RequestView or RequestStepStats): 1 - the mean expert
    reuse of those that measured theirs (moe_serve.py's module docstring, reuse); None where none did."""
    known = [self._reuse[r.request_id][0] for r in reqs if r.request_id in self._reuse]
    return 1.0 - sum(known) / len(known) if known else None


def priced_for(self: MoeServePolicy, reqs) -> StepTimeModel:
    """The cost model every decision about these requests prices with: accepted drafts at their own expert reuse
    (`fresh_accepted`, StepTimeModel.reusing) where any measured it, else the fitted model."""
    fresh = fresh_accepted(self, reqs)
    return self.model if fresh is None else self.model.reusing(fresh)


def depth_key(depth: int) -> str:
    return f"draft-depth-{depth}"
