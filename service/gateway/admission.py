"""Before the engine: known model (404), prompt within bounds (413), room in flight (429 tenant / 503 engines,
overload.py), tenant within RPM/TPM (429)."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

from service.gateway.errors import GatewayError
from service.gateway.limits import Admission
from service.gateway.overload import Lease
from service.gateway.schemas import ChatCompletionRequest, CompletionRequest, prompt_sizes
from service.gateway.state import GatewayState
from service.gateway.tenants import Tenant


@dataclass(frozen=True)
class Ticket:
    """An admitted request's charge, to be corrected to real usage when it ends."""

    tenant: Tenant  # who pays
    charged_tokens: int  # tokens reserved at admission (prompt estimate + max output)
    headers: dict[str, str]  # x-ratelimit-* headers for the response
    lease: Lease  # its share of the engines' outstanding-work bound, released when it ends
    rid: str  # request id: the engine's rid, the limits store's charge id, the client's x-request-id


def estimate_prompt_tokens(text_bytes: int, direct_tokens: int, bytes_per_token: float) -> int:
    return math.ceil(text_bytes / bytes_per_token) + direct_tokens


def ratelimit_headers(tenant: Tenant, decision: Admission) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(tenant.rpm),
        "x-ratelimit-limit-tokens": str(tenant.tpm),
        "x-ratelimit-remaining-requests": str(decision.remaining_requests),
        "x-ratelimit-remaining-tokens": str(decision.remaining_tokens),
    }


async def admit(state: GatewayState, tenant: Tenant, body: CompletionRequest | ChatCompletionRequest) -> Ticket:
    models = state.served_models()
    if body.model not in models:
        raise GatewayError(
            404,
            f"The model '{body.model}' does not exist. Served: {sorted(models)}.",
            code="model_not_found",
            param="model",
        )
    config = state.config
    prompts = [estimate_prompt_tokens(b, t, config.limits.bytes_per_token) for b, t in prompt_sizes(body)]
    if max(prompts) > config.max_prompt_tokens:
        raise GatewayError(
            413,
            f"Prompt is too long: about {max(prompts)} tokens, this gateway accepts at most {config.max_prompt_tokens}.",
            code="context_length_exceeded",
            param="messages" if isinstance(body, ChatCompletionRequest) else "prompt",
        )
    max_tokens = (
        body.requested_max_tokens() if isinstance(body, ChatCompletionRequest) else body.max_tokens
    ) or config.default_max_tokens
    cost = sum(prompts) + max_tokens * body.n * len(prompts)
    try:
        lease = state.in_flight.admit(tenant, cost, state.tenants.priorities)
    except GatewayError as refusal:
        state.metrics.overload_refused.labels(tenant.name, refusal.code).inc()
        raise
    rid = f"moe-{uuid.uuid4().hex}"
    try:
        decision = await state.limiter.acquire(tenant.name, tenant.rpm, tenant.tpm, cost, state.now_ms(), rid)
    except BaseException:
        state.in_flight.release(lease)
        raise
    headers = ratelimit_headers(tenant, decision)
    if decision.allowed:
        return Ticket(tenant, cost, headers, lease, rid)
    state.in_flight.release(lease)
    if decision.retry_after_s is None:
        state.metrics.rate_limited.labels(tenant.name, "too_large").inc()
        raise GatewayError(
            429,
            f"Request too large: needs about {cost} tokens, your limit is {tenant.tpm} tokens per minute.",
            code="tokens_exceed_limit",
            headers=headers,
        )
    limit = "requests" if decision.remaining_requests < 1 else "tokens"
    state.metrics.rate_limited.labels(tenant.name, limit).inc()
    retry = math.ceil(decision.retry_after_s)
    raise GatewayError(
        429,
        f"Rate limit reached for {limit} per minute (limits: {tenant.rpm} RPM, {tenant.tpm} TPM). Retry in {retry}s.",
        code=f"rate_limit_{limit}",
        headers={**headers, "Retry-After": str(max(retry, 1))},
    )
