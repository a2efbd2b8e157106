"""Scratch (76th session): policy variants for the draft-stop A/B, registered by sitecustomize.py beside this file."""

import dataclasses

from service.policy.moe_serve import MoeServePolicy
from service.policy.static import StaticPolicy


class NoStop(MoeServePolicy):
    """moe-serve with its drafts run to the K it chose (draft_stop = 0: as before the stop)."""

    def __init__(self, **params):
        super().__init__(**{**params, "draft_stop": 0.0})


class StaticStop(StaticPolicy):
    """static K = 4 whose chains stop at a draft below 1.1x its runner-up's probability."""

    def __init__(self, **params):
        super().__init__(k=4)

    def decide(self, batch):
        return dataclasses.replace(super().decide(batch), draft_stop=1.1)


class CapK(MoeServePolicy):
    """moe-serve whose speculating requests draft to the step's cap (batch.max_k), the stop choosing how deep."""

    def decide(self, batch):
        d = super().decide(batch)
        cap = batch.max_k
        return dataclasses.replace(
            d, requests=tuple(dataclasses.replace(r, k=cap, verify_len=cap) if r.k else r for r in d.requests)
        )


class CapKRest4(CapK):
    """CapK resting at most 4 steps at a time."""

    def __init__(self, **params):
        super().__init__(**{**params, "max_rest": 4})
