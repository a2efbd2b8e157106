"""Limits through the HTTP gateway: 200 concurrent clients over two gateway replicas sharing the real Redis."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import httpx

from service.gateway.app import create_app
from service.gateway.config import LimitsConfig
from service.gateway.limits_outage import OutageConfig
from tests.gateway.conftest import ACME, KEY, gateway_config
from tests.gateway.servers import serve
from tests.gateway.test_limits import REDIS_URL, needs_redis

FIXED_NOW = 1_800_000_000.0  # seconds; a frozen clock, so no refill happens while the burst runs


@needs_redis
def test_no_over_admission_across_two_gateways(fresh_engine):
    _, record, engine_url = fresh_engine
    prefix = f"moe_serve_test:{uuid.uuid4().hex}"
    config = gateway_config(
        (engine_url,),
        tenants=(replace(ACME, rpm=50),),
        limits=LimitsConfig(redis_url=REDIS_URL, key_prefix=prefix, outage=OutageConfig(mode="closed", timeout_s=30.0)),
    )
    with (
        serve(create_app(config, clock=lambda: FIXED_NOW)) as a,
        serve(create_app(config, clock=lambda: FIXED_NOW)) as b,
    ):

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=200)
            async with httpx.AsyncClient(timeout=30, limits=limits) as client:
                body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 1}
                headers = {"Authorization": f"Bearer {KEY}"}
                return await asyncio.gather(
                    *(client.post((a, b)[i % 2] + "/v1/completions", json=body, headers=headers) for i in range(200))
                )

        try:
            replies = asyncio.run(burst())
        finally:
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            keys = list(client.scan_iter(match=f"{prefix}:*"))
            if keys:
                client.delete(*keys)
    statuses = [r.status_code for r in replies]
    assert statuses.count(200) == 50
    assert statuses.count(429) == 150
    assert len(record.requests) == 50  # refused requests never reached the engine
    assert all("retry-after" in r.headers for r in replies if r.status_code == 429)
