"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter

from service.gateway.deps import StateDep, TenantDep

router = APIRouter()


@router.get("/v1/models", tags=["openai"])
async def list_models(_: TenantDep, state: StateDep):
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "moe-serve"} for name in state.served_models()
        ],
    }
