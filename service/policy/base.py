"""The policy Protocol and the registry that builds policies by name.

A policy is a small stateful object: `decide` before drafting, `trim` after drafting (when the drafter's
confidences are known), `observe` after the step ran. It never reads a clock or does I/O.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from service.policy.types import BatchView, Decision, RequestDecision, StepStats


class SpeculationPolicy(Protocol):
    def decide(self, batch: BatchView) -> Decision:
        """Per-request draft length K (0 = plain decode) and the expert budget, before drafting."""
        ...

    def trim(self, batch: BatchView, decision: Decision) -> Decision:
        """Per-request verify length after drafting; `batch` now carries each request's draft confidences."""
        ...

    def observe(self, stats: StepStats) -> None:
        """Learn from what the step measured."""
        ...


# name -> "module:Class"; imported lazily so the registry costs nothing to import.
_POLICIES: dict[str, str] = {
    "static": "service.policy.static:StaticPolicy",
    "sglang-adaptive": "service.policy.sglang_adaptive:SglangAdaptivePolicy",
    "cascade": "service.policy.cascade:CascadePolicy",
    "adaspec": "service.policy.adaspec:AdaSpecPolicy",
    "moe-serve": "service.policy.moe_serve:MoeServePolicy",
}


def available_policies() -> tuple[str, ...]:
    return tuple(sorted(_POLICIES))


def make_policy(name: str, **params: object) -> SpeculationPolicy:
    """Build a fresh policy; `params` are the policy class's keyword arguments."""
    if name not in _POLICIES:
        raise ValueError(f"unknown speculation policy {name!r}; available: {', '.join(available_policies())}")
    module_name, class_name = _POLICIES[name].split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for policy {name!r}: {exc}") from exc


def plan(
    batch: BatchView,
    ks: list[int],
    expert_budget: tuple[int, ...] | None = None,
    judge: frozenset[str] = frozenset(),
    rest_until: tuple[int, ...] = (),
    draft_stop: float = 0.0,
    accept_stop: float = 0.0,
) -> Decision:
    """A decision that verifies every drafted token: verify_len = K, each K clamped to [0, batch.max_k]; `judge`,
    `rest_until`, `draft_stop`, `accept_stop`: Decision's."""
    return Decision(
        requests=tuple(
            RequestDecision(r.request_id, k, k)
            for r, k in zip(batch.requests, (min(max(k, 0), batch.max_k) for k in ks), strict=True)
        ),
        expert_budget=expert_budget,
        judge=judge,
        rest_until=rest_until,
        draft_stop=draft_stop,
        accept_stop=accept_stop,
    )
