"""moe-serve's allocation (moe_serve.py's docstring has the objective J and the rest of the policy): which K per request
minimises J = T(K⃗) · Σ_r 1/e_r(K_r) in a step, and the predicted step time T it is priced with.

  rule     for draft depth D = 1, 2, ... (drafting is batch-wide, so each depth carries a fixed cost): start at
           K_r = D and drop the tail draft of the request that gains least while dropping it lowers J (its U_r < 1),
           then drop whole the requests whose catch-up outweighs their drafts; keep the D with the lowest J over
           every depth up to the largest cap: J need not fall steadily with D, a verify's first tokens waking the
           most fresh experts, so at batch 8 (CPU engine, moe-fine x48 on AMX tiles, NGRAM prose at p ~ 0.7 per
           draft) D = 1 and 2 priced above K = 0 and D = 4 23 % below it, and a search that stopped after two
           depths without improvement never reached it (static K = 3 ran 0.77x of no speculation's TPOT there,
           moe-serve 1.01x; bench/results/amx-b8-s47). It stopped so for STANDALONE until the fifty-first session,
           where it kept prose at batch 8 plain with depth 4 priced 6 % under K = 0 (bench/results/prose-b8-s51).
           K_r never exceeds the tokens r has left after the step's own.
  margin   drafts are chosen over K = 0 only where J falls by more than the cost model's measured error at this
           batch size and draft depth (StepTimeModel.error), and by at least MIN_MARGIN (1 %: before the error is
           measured, first bets are made on a gain, not on a tie): a batch-1 code request whose verifies were
           predicted 2.5 % better per token ran 1.05x of those kept plain (CPU, moe-fine x48). Per depth: at batch 1
           (STANDALONE) moe-serve ran one- and two-draft steps only, and prose judged at p = 0.94 stayed plain, K = 3
           priced 5 % better under those steps' 7.7 % error.
  layout   the rule above is for a ragged verify (each request verifies K_r + 1 tokens). Where the engine verifies
           every request at the batch's deepest K (BatchView.verify_layout "rectangular": n = B·(D + 1)) a shallower
           K_r saves nothing, so each depth D sets K_r = min(D, cap_r) for all; where it verifies the whole draft
           whatever K is ("fixed") cost does not depend on K and the full draft wins.

Methods of MoeServePolicy, kept apart by idea."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.policy.cost_model import StepTimeModel
from service.policy.moe_serve_eliminate import eliminate
from service.policy.moe_serve_terms import amortized, chain, sort_key
from service.policy.types import BatchView

if TYPE_CHECKING:
    from service.policy.moe_serve import MoeServePolicy

# the least relative fall in J that drafts must promise over K = 0 where the cost model's error is not measured
# (or smaller): a tie between calibrated prices is not a gain (with plain and speculative steps both priced at
# what they measured, a one-draft step never measured priced 0.01 % under a plain step at p = 0)
MIN_MARGIN = 0.01


def chains_of(probs: list[list[float]], ks: list[int]) -> list[list[float]]:
    return [chain(p, k) for p, k in zip(probs, ks, strict=True)]


def allocate(
    self: MoeServePolicy,
    probs: list[list[float]],
    caps: list[int],
    cap_s: float,
    drafting: bool,
    layout: BatchView | None = None,
    model: StepTimeModel | None = None,
) -> list[int]:
    """K per request (module docstring); probs[r][i] = P(accept draft i+1 | drafts 1..i accepted); `layout`:
    the batch whose verify layout prices the tokens and whose requests' draft backlogs price drafting (None =
    ragged, no backlog); `model`: the cost model to price with (default: `layout`'s requests' `_priced_for`).

    With `drafting`, every depth D from 1 to the largest cap is priced (the module docstring's rule); without it
    (trim), the drafts exist already and one pass starts from caps."""
    model = model or (self.model if layout is None else self._priced_for(layout.requests))
    chains = chains_of(probs, caps)
    backlogs = [0.0] * len(chains) if layout is None else amortized(layout.requests, chains)
    best_ks = zero = [0] * len(chains)
    best = plain = self._objective(zero, chains, cap_s, drafting, layout, model=model)

    def better(ks: list[int], key: tuple[int, float]) -> bool:  # than the best so far, and than K = 0 by margin
        error = max(self.model.error(len(chains), max(ks, default=0) if drafting else None) or 0.0, MIN_MARGIN)
        return key < best and key < (plain[0], plain[1] * (1.0 - error))

    if layout is not None and layout.verify_layout != "ragged":
        for depth in range(1, max(caps, default=0) + 1):
            ks = [min(depth, c) for c in caps]
            key = self._objective(ks, chains, cap_s, drafting, layout, model=model)
            if better(ks, key):
                best_ks, best = ks, key
        return best_ks
    pricer = model.pricer(len(chains), self.expert_budget)  # every configuration below is of this batch
    if not drafting:
        ks, key = eliminate(pricer, chains, list(caps), cap_s, drafting, backlogs)
        return ks if better(ks, key) else best_ks
    for depth in range(1, max(caps, default=0) + 1):
        ks, key = eliminate(pricer, chains, [min(depth, c) for c in caps], cap_s, drafting, backlogs)
        if better(ks, key):
            best_ks, best = ks, key
    return best_ks


def objective(
    self: MoeServePolicy,
    ks: list[int],
    chains: list[list[float]],
    cap_s: float,
    drafting: bool,
    layout: BatchView | None = None,
    amortize: bool = True,
    model: StepTimeModel | None = None,
) -> tuple[int, float]:
    """Sort key of a configuration: within the SLO, by J = T · Σ 1/e_r; over it, after all, by T / min_r e_r.
    `amortize`: draft backlogs as their share of one step (what the SLO, a mean over a request's tokens, sees),
    else whole (what this one step costs)."""
    t = self._time(ks, drafting, layout, chains, amortize, model)
    e = [1.0 + sum(c[:k]) for c, k in zip(chains, ks, strict=True)]
    return sort_key(t, sum(1.0 / x for x in e), len(e), cap_s)


def step_time(
    self: MoeServePolicy,
    ks: list[int],
    drafting: bool,
    layout: BatchView | None = None,
    chains: list[list[float]] | None = None,
    amortize: bool = True,
    model: StepTimeModel | None = None,
) -> float:
    """Predicted step time. `chains`: the requests' acceptance chains, which give the drafts expected accepted
    (verify cost depends on them, expert_routing.SplitAffinity) and, with `amortize`, each drafting request's
    backlog as its share of one step (`amortized`); without them the backlogs count whole. `model`: the cost
    model to price with (default: `layout`'s requests' `_priced_for`)."""
    model = model or (self.model if layout is None else self._priced_for(layout.requests))
    tokens = sum(ks) + len(ks) if layout is None else layout.verify_tokens(ks)
    accepted = None if chains is None else sum(sum(c[:k]) for c, k in zip(chains, ks, strict=True))
    if not drafting:
        return model.verify_time(tokens, len(ks), self.expert_budget, accepted)
    backlog = 0.0
    if layout is not None:
        whole = [float(r.draft_backlog) for r in layout.requests]
        shares = amortized(layout.requests, chains) if amortize and chains is not None else whole
        backlog = sum(b for b, k in zip(shares, ks, strict=True) if k > 0)
    return model.step_time(tokens, len(ks), max(ks, default=0), sum(ks), self.expert_budget, backlog, accepted)
