"""POST /v1/completions."""

from __future__ import annotations

from fastapi import APIRouter

from service.gateway.admission import admit
from service.gateway.deps import StateDep, TenantDep
from service.gateway.logprobs import asked as logprobs_asked
from service.gateway.relay import Relay
from service.gateway.schemas import CompletionRequest
from service.gateway.speculation import grant

router = APIRouter()


@router.post("/v1/completions", tags=["openai"])
async def create_completion(body: CompletionRequest, tenant: TenantDep, state: StateDep):
    speculation = grant(tenant, body.speculation, exact=logprobs_asked(body))  # refused before it is charged
    relay = Relay(state, await admit(state, tenant, body), "/v1/completions", body, speculation)
    return await (relay.stream() if body.stream else relay.complete())
