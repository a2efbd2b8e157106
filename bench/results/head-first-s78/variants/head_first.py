"""Scratch (78th session): moe-serve variants for the A/B of the priced stop.
moe-serve-nowait  (run1, run2; code before the priced stop) moe-serve without judged_first, so a STANDALONE
                  request may speculate from its first decode step on the batch-wide acceptance prior, its chains
                  gated by the acceptance head at 0.6, instead of waiting at K = 0 for its first judgement
moe-serve-floor   (run3 on; the code with the priced stop) moe-serve with gated chains (no first-judgement wait)
                  but the head's fixed floor 0.6 instead of the priced stop: moe-serve-nowait's behaviour
moe-serve-before  (run3 on) as moe-serve before the session: the floor, and judged_first's wait (the policy told
                  the chains are not gated; the engine still stops them at the floor)"""

import dataclasses

from service.policy.moe_serve import MoeServePolicy


class NoWait(MoeServePolicy):
    def __init__(self, **params):
        super().__init__(**{**params, "judged_first": False})


class Floor(MoeServePolicy):
    def __init__(self, **params):
        super().__init__(**{**params, "priced_stop": False})


class Before(Floor):
    def decide(self, batch):
        return super().decide(dataclasses.replace(batch, gated=False))
