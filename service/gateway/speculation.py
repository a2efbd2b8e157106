"""Per-request speculation control: the `speculation` extension field of completions and chat, bounded by the tenant.

    {"speculation": {"policy": "cascade", "max_k": 2, "expert_budget": 4, "stats": true}}

(openai SDK: `extra_body={"speculation": {...}}`). Every key is optional:
- `policy`: the speculation policy for this request (`static`, `sglang-adaptive`, `cascade`, `adaspec`, `moe-serve`,
  or `sglang` for SGLang's own behaviour: the whole draft verified); one of the tenant's `allowed_policies`.
- `max_k`: at most this many draft tokens per step (0 = no speculation); at most the tenant's `max_k`.
- `expert_budget`: experts per MoE layer kept in verification (lossy, MoE-Spec); needs the tenant's
  `allow_lossy_budget` and at least its `min_expert_budget`.
- `stats`: return the request's speculation stats (`metrics.speculative_decoding`, vLLM's field; in a stream, in
  the final usage chunk).
A malformed field is a 400, asking for more than the tenant allows a 403 (permission_error); both name the field.
Asking for less speculation than the tenant's default (a lower `max_k`, 0 included) is always allowed.
A request that asks for logprobs is verified exactly: its tenant's lossy budget is not offered to the engine for it
(one verify forward serves the batch, so this keeps the whole step exact) and an `expert_budget` beside logprobs is a
400: the logprobs would be those of a model with experts dropped, not the target's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from service.gateway.errors import GatewayError
from service.policy import available_policies

if TYPE_CHECKING:
    from service.gateway.tenants import Tenant

ENGINE_OWN = "sglang"  # the engine plugin's name for SGLang's own behaviour: no policy, every draft verified
ANY_POLICY = "*"  # in a tenant's allowed_policies: every known policy
MAX_K = 64  # draft tokens; a bound on the field, far above any drafter's depth


def policy_name(raw: str) -> str:
    """The registry spelling (`moe_serve` and `moe-serve` are one policy, as the engine reads them)."""
    return raw.strip().replace("_", "-")


def known_policies() -> tuple[str, ...]:
    return (*available_policies(), ENGINE_OWN)


class SpeculationRequest(BaseModel):
    """The `speculation` field as a request sends it; unknown keys are refused (it is our field: a typo is an error)."""

    model_config = ConfigDict(extra="forbid")

    policy: str | None = Field(default=None, min_length=1, max_length=64)
    max_k: int | None = Field(default=None, ge=0, le=MAX_K)
    expert_budget: int | None = Field(default=None, ge=1, le=4096)
    stats: bool = False


@dataclass(frozen=True)
class SpeculationGrant:
    """What the engine is told for one request, after the tenant's bounds."""

    policy: str  # policy name as the tenant configures it or the request asked (registry spelling)
    max_k: int | None  # draft tokens, cap on K; None = no cap beyond the engine's drafter
    expert_budget: int | None  # experts per MoE layer in verify; None = no request budget
    stats: bool  # return the request's speculation stats in the response
    allow_lossy_budget: bool  # the engine may drop experts in a verify forward this request is part of


def grant(tenant: Tenant, asked: SpeculationRequest | None, *, exact: bool = False) -> SpeculationGrant:
    """The speculation settings of one request of `tenant`; GatewayError 400/403 naming the field otherwise.
    `exact`: the request needs the target model's own probabilities (it asked for logprobs)."""
    asked = asked or SpeculationRequest()
    if exact and asked.expert_budget is not None:
        raise GatewayError(
            400,
            "speculation.expert_budget drops experts in verification, so the logprobs asked for would not be the "
            "model's; ask for one or the other.",
            code="invalid_speculation",
            param="speculation.expert_budget",
        )
    return SpeculationGrant(
        policy=_policy(tenant, asked.policy),
        max_k=_max_k(tenant, asked.max_k),
        expert_budget=_expert_budget(tenant, asked.expert_budget),
        stats=asked.stats,
        allow_lossy_budget=tenant.allow_lossy_budget and not exact,
    )


def _policy(tenant: Tenant, asked: str | None) -> str:
    if asked is None:
        return tenant.policy
    name = policy_name(asked)
    if name not in known_policies():
        raise GatewayError(
            400,
            f"Unknown speculation policy {asked!r}; known: {', '.join(known_policies())}.",
            code="invalid_speculation",
            param="speculation.policy",
        )
    allowed = {policy_name(p) for p in (*tenant.allowed_policies, tenant.policy)}
    if name not in allowed and ANY_POLICY not in allowed:
        raise GatewayError(
            403,
            f"Speculation policy {name!r} is not allowed for your API key; allowed: {', '.join(sorted(allowed))}.",
            code="speculation_not_allowed",
            param="speculation.policy",
        )
    return name


def _max_k(tenant: Tenant, asked: int | None) -> int | None:
    if asked is None:
        return tenant.max_k
    if tenant.max_k is not None and asked > tenant.max_k:
        raise GatewayError(
            403,
            f"speculation.max_k={asked} exceeds your limit of {tenant.max_k} draft tokens per step.",
            code="speculation_not_allowed",
            param="speculation.max_k",
        )
    return asked


def _expert_budget(tenant: Tenant, asked: int | None) -> int | None:
    if asked is None:
        return None
    if not tenant.allow_lossy_budget:
        raise GatewayError(
            403,
            "speculation.expert_budget makes verification lossy, which your API key does not allow.",
            code="speculation_not_allowed",
            param="speculation.expert_budget",
        )
    if tenant.min_expert_budget is not None and asked < tenant.min_expert_budget:
        raise GatewayError(
            403,
            f"speculation.expert_budget={asked} is below your limit of {tenant.min_expert_budget} experts per layer.",
            code="speculation_not_allowed",
            param="speculation.expert_budget",
        )
    return asked
