"""Redis outages against a real redis-server this test starts and stops on its own port (never the shared 6379):
fail closed answers 503, fail open admits in-process for a bounded time, and no request is charged twice when the
store comes back, whether its reply was lost (server paused) or it was stopped and restarted with its data."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import httpx
import pytest

from service.gateway.app import create_app
from service.gateway.config import LimitsConfig
from service.gateway.errors import GatewayError
from service.gateway.limits import WINDOW_MS
from service.gateway.limits_outage import OutageConfig, ResilientLimiter
from service.gateway.limits_redis import RedisLimiter
from tests.gateway.conftest import OTHER_KEY, SLOW, gateway_config
from tests.gateway.redis_server import RedisServer, redis_server_binary
from tests.gateway.servers import serve

pytestmark = pytest.mark.skipif(redis_server_binary() is None, reason="needs the redis-server binary")
NOW_MS = 1_800_000_000_000  # a frozen clock: no refill, so bucket levels are exact sums of charges
RPM, TPM = 10, 1000


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def levels(server: RedisServer, prefix: str, tenant: str = "t") -> tuple[int, int]:
    """(requests, tokens) left in the Redis buckets, whole units."""
    client = server.client()
    req = client.hget(f"{prefix}:{{{tenant}}}:req", "l")
    tok = client.hget(f"{prefix}:{{{tenant}}}:tok", "l")
    return int(req) // WINDOW_MS, int(tok) // WINDOW_MS


def resilient(server: RedisServer, clock=None, **outage) -> tuple[ResilientLimiter, str]:
    prefix = f"outage_test:{uuid.uuid4().hex}"
    config = OutageConfig(timeout_s=0.2, retry_s=0.05, **outage)
    store = RedisLimiter(server.url, prefix, timeout_s=config.timeout_s)
    return ResilientLimiter(store, config, **({"clock": clock} if clock else {})), prefix


async def until_store_answers(limiter: ResilientLimiter, server: RedisServer) -> None:
    """Wait for the server itself, then flush the queued settlements (what the next request would trigger)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            server.client().ping()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    limiter._next_try = 0.0  # the retry interval has passed
    while limiter._pending:
        await limiter.flush()
        if time.monotonic() > deadline:
            raise AssertionError("pending settlements never reached the store")


async def test_lost_reply_is_undone_so_the_request_is_charged_once():
    """A paused Redis takes the command, the reply never comes: the gateway charges in-process, and the Redis charge
    that landed on resume is cancelled by rid when the store answers again."""
    with RedisServer() as server:
        limiter, prefix = resilient(server)
        try:
            assert (await limiter.acquire("t", RPM, TPM, 100, NOW_MS, "r1")).allowed  # in Redis
            server.pause()
            started = time.monotonic()
            second = await limiter.acquire("t", RPM, TPM, 200, NOW_MS, "r2")  # times out, admitted in-process
            assert second.allowed and time.monotonic() - started < 1.0
            await limiter.adjust("t", RPM, TPM, -40, NOW_MS, "r1")  # r1 used 60 of 100: queued while down
            await limiter.adjust("t", RPM, TPM, -50, NOW_MS, "r2")  # r2 settles in-process
            assert limiter.stats().up is False and limiter.stats().pending == 2
            server.resume()
            await until_store_answers(limiter, server)
            assert levels(server, prefix) == (RPM - 1, TPM - 60)  # r1 alone, at its real usage; r2 undone
            assert await limiter.flush() == 0  # nothing left to replay; replaying again changes nothing:
            assert not await limiter.store.cancel("t", RPM, TPM, NOW_MS, "r2")
            await limiter.store.adjust("t", RPM, TPM, -40, NOW_MS, "r1")
            assert levels(server, prefix) == (RPM - 1, TPM - 60)
            assert (await limiter.local.acquire("t", RPM, TPM, 0, NOW_MS)).remaining_tokens == TPM - 150
        finally:
            await limiter.close()


async def test_restart_with_data_settles_once():
    """Redis stopped and started again (append-only file): requests admitted before the outage settle once, those
    admitted during it stay in-process, and the queued cancel of a refused connection is a no-op."""
    with RedisServer(persistent=True) as server:
        limiter, prefix = resilient(server)
        try:
            assert (await limiter.acquire("t", RPM, TPM, 100, NOW_MS, "a")).allowed
            server.stop()
            assert (await limiter.acquire("t", RPM, TPM, 300, NOW_MS, "b")).allowed  # refused connection: in-process
            await limiter.adjust("t", RPM, TPM, -90, NOW_MS, "a")  # queued
            server.start()
            await until_store_answers(limiter, server)
            assert levels(server, prefix) == (RPM - 1, TPM - 10)
            await limiter.store.adjust("t", RPM, TPM, -90, NOW_MS, "a")  # a second replay is a no-op
            assert levels(server, prefix) == (RPM - 1, TPM - 10)
            assert limiter.stats() == replace(limiter.stats(), up=True, pending=0, local_admissions=1)
        finally:
            await limiter.close()


async def test_fail_open_is_bounded_in_time_then_closed():
    clock = FakeClock()
    with RedisServer() as server:
        limiter, _ = resilient(server, clock=clock, fail_open_s=30.0, local_share=0.5)
        try:
            server.stop()
            assert (await limiter.acquire("t", 4, TPM, 1, NOW_MS, "x1")).allowed
            assert (await limiter.acquire("t", 4, TPM, 1, NOW_MS, "x2")).allowed
            refused = await limiter.acquire("t", 4, TPM, 1, NOW_MS, "x3")  # local share: 4 * 0.5 = 2 RPM
            assert not refused.allowed and refused.retry_after_s > 0
            clock.t += 31.0
            with pytest.raises(GatewayError) as closed:
                await limiter.acquire("t", 4, TPM, 1, NOW_MS, "x4")
            assert closed.value.status == 503 and closed.value.code == "limits_unavailable"
            server.start()
            clock.t += 1.0
            assert (await limiter.acquire("t", 4, TPM, 1, NOW_MS, "x5")).allowed  # the store is back: Redis again
            assert limiter.stats().up
        finally:
            await limiter.close()


def outage_gateway(engine_url: str, server: RedisServer, **outage):
    prefix = f"outage_test:{uuid.uuid4().hex}"
    limits = LimitsConfig(
        redis_url=server.url, key_prefix=prefix, outage=OutageConfig(timeout_s=0.2, retry_s=0.05, **outage)
    )
    return create_app(gateway_config((engine_url,), limits=limits, tenants=(replace(SLOW, rpm=4),)))


BODY = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 2}


def post(url: str, key: str = OTHER_KEY) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(url + "/v1/completions", json=BODY, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return response, time.monotonic() - started


def until_ok(url: str, timeout_s: float = 10.0) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        response, _ = post(url)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.05)


def test_fail_closed_answers_503_fast_and_recovers(fresh_engine):
    with RedisServer() as server, serve(outage_gateway(fresh_engine[2], server, mode="closed")) as url:
        assert post(url)[0].status_code == 200
        server.stop()
        for _ in range(3):
            response, seconds = post(url)
            assert response.status_code == 503 and seconds < 1.0
            assert response.json()["error"]["code"] == "limits_unavailable"
            assert int(response.headers["retry-after"]) >= 1
        assert httpx.get(url + "/metrics").text.count("moe_serve:limits_store_up 0.0") == 1
        server.start()
        assert until_ok(url).status_code == 200


def test_fail_open_admits_at_the_local_share_then_redis_again(fresh_engine):
    with RedisServer() as server, serve(outage_gateway(fresh_engine[2], server, local_share=0.5)) as url:
        server.stop()
        first, seconds = post(url)
        assert first.status_code == 200 and seconds < 1.0
        assert post(url)[0].status_code == 200
        refused = post(url)[0]  # tenant "slow" has 4 RPM; alone, this gateway admits half of it
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limit_requests"
        server.start()
        assert until_ok(url).status_code == 200
        assert "moe_serve:limits_store_up 1.0" in httpx.get(url + "/metrics").text


async def test_the_store_coming_back_is_noticed_without_traffic():
    """While down, a watcher pings the store: once it answers, queued settlements are replayed with no request."""
    with RedisServer(persistent=True) as server:
        limiter, prefix = resilient(server)
        try:
            assert (await limiter.acquire("t", RPM, TPM, 100, NOW_MS, "w1")).allowed
            server.stop()
            await limiter.adjust("t", RPM, TPM, -30, NOW_MS, "w1")  # fails: queued, the store marked down
            assert limiter.stats().up is False
            server.start()
            for _ in range(200):
                if limiter.stats().up and limiter.stats().pending == 0:
                    break
                await asyncio.sleep(0.02)
            assert limiter.stats().up and limiter.stats().pending == 0
            assert levels(server, prefix) == (RPM - 1, TPM - 70)
        finally:
            await limiter.close()
