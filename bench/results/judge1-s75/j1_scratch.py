"""Scratch (75th session): the policy sitecustomize.py beside this file registers."""

from service.policy.moe_serve import MoeServePolicy


class JudgeAfterOne(MoeServePolicy):
    def __init__(self, **kwargs):
        super().__init__(**{"judge_after": 1, **kwargs})
