"""GET /health (the gateway process is up), /ready (an engine replica can serve), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.gateway.deps import StateDep
from service.gateway.errors import GatewayError

router = APIRouter()


@router.get("/health", tags=["ops"])
async def health():
    return {"status": "ok"}


@router.get("/ready", tags=["ops"])
async def ready(state: StateDep):
    if not state.engine.any_healthy():
        raise GatewayError(503, "No healthy engine replica.", code="engine_unavailable")
    if not state.served_models():
        raise GatewayError(503, "No model known yet (engines have not listed any).", code="engine_unavailable")
    return {"status": "ready", "replicas": [s.url for s in state.engine.stats() if s.healthy]}


@router.get("/metrics", tags=["ops"])
async def metrics(state: StateDep):
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
