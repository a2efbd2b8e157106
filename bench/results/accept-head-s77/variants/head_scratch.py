"""Scratch (77th session): policy variants for the acceptance-head A/B, registered by sitecustomize.py beside this
file."""

from service.policy.moe_serve import MoeServePolicy
from service.policy.static import StaticPolicy


class StaticMargin(StaticPolicy):
    """static K = 4 whose chains stop at a draft below 1.1x its runner-up's probability (the 76th session's stop)."""

    def __init__(self, **params):
        super().__init__(k=4, draft_stop=1.1)


class StaticHead(StaticPolicy):
    """static K = 4 whose chains stop at a draft the acceptance head gives below 0.6."""

    def __init__(self, **params):
        super().__init__(k=4, accept_stop=0.6)


class MarginOnly(MoeServePolicy):
    """moe-serve without the head: its chains stop by the margin alone (as in the 76th session)."""

    def __init__(self, **params):
        super().__init__(**{**params, "accept_stop": 0.0})
