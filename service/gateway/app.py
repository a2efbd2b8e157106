"""`create_app(config)`: the gateway's FastAPI app, with every collaborator built here and nothing global."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import asynccontextmanager

import httpx
from fastapi import Depends, FastAPI

from service.gateway.body_limit import BodyLimit
from service.gateway.config import GatewayConfig
from service.gateway.deps import require_any_key
from service.gateway.engine_client import EngineClient
from service.gateway.errors import install_error_handlers
from service.gateway.limits import InProcessLimiter, RateLimiter
from service.gateway.metrics import GatewayMetrics
from service.gateway.overload import InFlight
from service.gateway.routes import admin, chat, completions, health, models
from service.gateway.state import GatewayState
from service.gateway.tenants import TenantRegistry


def build_limiter(config: GatewayConfig) -> RateLimiter:
    limits = config.limits
    if limits.redis_url:
        from service.gateway.limits_outage import ResilientLimiter
        from service.gateway.limits_redis import RedisLimiter

        store = RedisLimiter(limits.redis_url, limits.key_prefix, timeout_s=limits.outage.timeout_s)
        return ResilientLimiter(store, limits.outage)
    return InProcessLimiter()


def create_app(
    config: GatewayConfig,
    *,
    limiter: RateLimiter | None = None,
    engine_transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """The gateway app. `limiter`, `engine_transport` and `clock` are seams for tests; production passes config only."""
    engine = EngineClient(config.engine, overload=config.overload, transport=engine_transport)
    limiter = limiter if limiter is not None else build_limiter(config)
    state = GatewayState(
        config=config,
        tenants=TenantRegistry(config.tenants),
        limiter=limiter,
        engine=engine,
        metrics=GatewayMetrics(engine.stats, getattr(limiter, "stats", None)),
        in_flight=InFlight(config.overload, engine.replicas),
        clock=clock,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await engine.start()
        try:
            yield
        finally:
            await engine.close()
            await state.limiter.close()

    app = FastAPI(
        title="moe-serve gateway",
        version="0.1.0",
        description="OpenAI-compatible multi-tenant front for SGLang engines (issue 5).",
        lifespan=lifespan,
        # Only /health, /ready and /metrics answer without a key: no public docs pages; the API description is
        # served to key holders below.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(require_any_key)])
    async def openapi() -> dict:
        return app.openapi()

    app.state.gateway = state
    install_error_handlers(app)
    for module in (completions, chat, models, health, admin):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, edges=config.edges)
    return app
