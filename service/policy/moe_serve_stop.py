"""moe-serve's stop (moe_serve.py's docstring): where the drafter's chains stop by an acceptance head
(BatchView.gated), the policy prices the stop instead of a fixed floor. A draft at depth i that the head gives a
probability π_i that it and the drafts above it are all accepted adds π_i to its request's expected tokens e and
one verified token (and, below the deepest cap, one more draft forward) to the step. Keeping it lowers the batch's
J = T · Σ_r 1/e_r where, to first order, π_i > e_{i-1} · B · ΔT_i / T: ΔT_i the step time one more verified token
adds at depth i, T the step's time with the drafts above it, B the batch size (exact at batch 1: π_i T > e_{i-1}
ΔT_i). Decision.accept_costs carries ρ_i = B · ΔT_i / T per depth; the engine applies the rule draft by draft with
the head's own π (moe_sglang/draft_stop.keeps). The prices are the allocation's (the calibrated cost model of this
batch): a verified token costs more where it wakes experts the step did not need, so the same draft is kept at
batch 8 and cut at batch 1 or the other way round, as the measured step times say; a fixed floor (0.6 on the
head's probability, the seventy-seventh session's) keeps a 0.65 draft at every depth and batch.

A method of MoeServePolicy, kept apart by idea."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.policy.moe_serve_allocate import chains_of
from service.policy.types import BatchView

if TYPE_CHECKING:
    from service.policy.moe_serve import MoeServePolicy


def stop_costs(
    self: MoeServePolicy,
    batch: BatchView,
    probs: list[list[float]],
    ks: list[int],
    caps: list[int],
    judge: set[str],
) -> tuple[float, ...]:
    """ρ_i (module docstring) for depths 1..max K of a step whose request r drafts up to ks[r], a request judged in
    it up to its cap (its judgement replays chains as they would be verified); () where the chains are not gated,
    the policy does not price its stop, or nobody drafts or is judged."""
    ks = [c if r.request_id in judge else k for r, k, c in zip(batch.requests, ks, caps, strict=True)]
    depth = max(ks, default=0)
    if not (batch.gated and self.priced_stop and depth):
        return ()
    levels = [[min(i, k) for k in ks] for i in range(depth + 1)]  # every request's chain cut at depth i
    verify = [self._time(ks_i, False, batch, chains_of(probs, ks_i)) for ks_i in levels]
    step = [self._time(ks_i, True, batch, chains_of(probs, ks_i)) for ks_i in levels]
    # one more draft forward: what depth 2 adds to drafting over depth 1 (depth 1 also carries the catch-up)
    forward = max(step[2] - verify[2] - (step[1] - verify[1]), 0.0) if depth > 1 else 0.0
    costs = []
    for i in range(1, depth + 1):
        reach = sum(k >= i for k in ks)  # requests whose chains may reach depth i
        # the step with the drafts above depth i: at depth 1, the plain verify and the first draft forward (sunk)
        before = step[i - 1] if i > 1 else step[1] - (verify[1] - verify[0])
        extra = verify[i] - verify[i - 1] + (forward if i < depth else 0.0)
        costs.append(max(len(ks) * extra / (reach * before), 0.0))
    return tuple(costs)
