"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.gateway.deps import get_state, require_tenant
from service.gateway.state import GatewayState
from service.gateway.tenants import Tenant

router = APIRouter()


@router.get("/v1/models", tags=["openai"])
async def list_models(_: Tenant = Depends(require_tenant), state: GatewayState = Depends(get_state)):
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "moe-serve"} for name in state.served_models()],
    }
