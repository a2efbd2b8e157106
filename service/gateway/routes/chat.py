"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.gateway.admission import admit
from service.gateway.deps import get_state, require_tenant
from service.gateway.relay import Relay
from service.gateway.schemas import ChatCompletionRequest
from service.gateway.state import GatewayState
from service.gateway.tenants import Tenant

router = APIRouter()


@router.post("/v1/chat/completions", tags=["openai"])
async def create_chat_completion(
    body: ChatCompletionRequest, tenant: Tenant = Depends(require_tenant), state: GatewayState = Depends(get_state)
):
    relay = Relay(state, await admit(state, tenant, body), "/v1/chat/completions", body)
    return await (relay.stream() if body.stream else relay.complete())
