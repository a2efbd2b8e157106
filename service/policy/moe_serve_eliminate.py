"""moe-serve's elimination pass (moe_serve.py's docstring, rule): from a start depth per request, drop the tail draft
that gains least while that lowers the objective, then drop whole the requests whose draft catch-up outweighs their
drafts."""

from __future__ import annotations

import heapq

from service.policy.moe_serve_terms import sort_key
from service.policy.step_pricer import StepPricer


def eliminate(
    pricer: StepPricer,
    chains: list[list[float]],
    ks: list[int],
    cap_s: float,
    drafting: bool,
    backlogs: list[float],
) -> tuple[list[int], tuple[int, float]]:
    """From `ks`, drop the tail draft whose request gains least from it while that lowers the objective;
    chains[r][i-1] = Π_{j<=i} p_rj, the tokens request r's i-th draft adds on average. A request whose last
    draft goes also takes its draft backlog (catch-up tokens) off the step; a last pass drops, whole, requests
    whose backlog costs more than their drafts return. `pricer`: the cost model's for this batch and expert budget."""
    e = [1.0 + sum(c[:k]) for c, k in zip(chains, ks, strict=True)]  # expected tokens per request
    harmonic = sum(1.0 / x for x in e)
    tokens, drafted, depth = sum(ks) + len(ks), sum(ks), max(ks, default=0)
    step_draft = 1 if drafting else 0
    backlog = sum(b for b, k in zip(backlogs, ks, strict=True) if k > 0) if drafting else 0

    accepted = sum(e) - len(e)  # drafts expected accepted: verify cost depends on them (expert_routing.SplitAffinity)

    def key(tokens: int, drafted: int, harmonic: float, backlog: float, accepted: float) -> tuple[int, float]:
        t = pricer.step(tokens, depth, drafted, backlog, accepted) if drafting else pricer.verify(tokens, accepted)
        return sort_key(t, harmonic, len(ks), cap_s)

    best = key(tokens, drafted, harmonic, backlog, accepted)
    heap = [(1.0 / (e[i] - chains[i][k - 1]) - 1.0 / e[i], i) for i, k in enumerate(ks) if k > 0]
    heapq.heapify(heap)
    while heap:
        loss, i = heap[0]
        freed = backlogs[i] * step_draft if ks[i] == 1 else 0
        tail = chains[i][ks[i] - 1]
        trial = key(tokens - 1, drafted - step_draft, harmonic + loss, backlog - freed, accepted - tail)
        if trial >= best:
            break
        heapq.heappop(heap)
        best, tokens, drafted, harmonic, backlog, accepted = (
            trial,
            tokens - 1,
            drafted - step_draft,
            harmonic + loss,
            backlog - freed,
            accepted - tail,
        )
        e[i] -= tail
        ks[i] -= 1
        if ks[i] > 0:
            heapq.heappush(heap, (1.0 / (e[i] - chains[i][ks[i] - 1]) - 1.0 / e[i], i))
    if drafting:
        for i in sorted((i for i, k in enumerate(ks) if k > 0 and backlogs[i] > 0), key=lambda i: -backlogs[i]):
            gone = 1.0 - 1.0 / e[i]  # its 1/e_r goes back to 1 (no drafts)
            own = e[i] - 1.0  # its expected accepted drafts
            trial = key(tokens - ks[i], drafted - ks[i], harmonic + gone, backlog - backlogs[i], accepted - own)
            if trial < best:
                best, tokens, drafted, harmonic, backlog, accepted = (
                    trial,
                    tokens - ks[i],
                    drafted - ks[i],
                    harmonic + gone,
                    backlog - backlogs[i],
                    accepted - own,
                )
                e[i], ks[i] = 1.0, 0
    return ks, best
