"""Scratch (78th session): moe-serve variants for the A/B of the priced stop.
moe-serve-nowait  (run1, run2; code before the priced stop) moe-serve without judged_first, so a STANDALONE
                  request may speculate from its first decode step on the batch-wide acceptance prior, its chains
                  gated by the acceptance head at 0.6, instead of waiting at K = 0 for its first judgement
moe-serve-floor   (run3 on; the code with the priced stop) moe-serve with gated chains (no first-judgement wait)
                  but the head's fixed floor 0.6 instead of the priced stop: moe-serve-nowait's behaviour
moe-serve-before  (run3 on) as moe-serve before the session: the floor, and judged_first's wait (the policy told
                  the chains are not gated; the engine still stops them at the floor)
moe-serve-cap     (run4; the session's final code) moe-serve whose requests, where the chains are gated and the
                  allocation chose K > 0, draft to their cap (the engine's K ceiling, the tokens they have left):
                  the head, not the allocation, decides how deep a chain goes"""

import dataclasses

from service.policy.moe_serve import MoeServePolicy
from service.policy.moe_serve_terms import life_cap


class NoWait(MoeServePolicy):
    def __init__(self, **params):
        super().__init__(**{**params, "judged_first": False})


class Floor(MoeServePolicy):
    def __init__(self, **params):
        super().__init__(**{**params, "priced_stop": False})


class Before(Floor):
    def decide(self, batch):
        return super().decide(dataclasses.replace(batch, gated=False))


class CapUp(MoeServePolicy):
    def decide(self, batch):
        d = super().decide(batch)
        if not batch.gated:
            return d
        cap = min(self.k_max, batch.max_k)
        raised = tuple(
            dataclasses.replace(r, k=c, verify_len=c) if r.k > 0 and (c := life_cap(cap, v)) > r.k else r
            for r, v in zip(d.requests, batch.requests, strict=True)
        )
        return dataclasses.replace(d, requests=raised)
