"""Token-bucket limits: the rule, Redis == in-process on random schedules, and no over-admission under 200 clients.

Redis tests use the real server at 127.0.0.1:6379 with a unique key prefix per run, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from service.gateway.limits import WINDOW_MS, InProcessLimiter, decide, refill

REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_available() -> bool:
    try:
        import redis

        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=0.5).ping())
    except Exception:
        return False


needs_redis = pytest.mark.skipif(not redis_available(), reason="needs Redis at 127.0.0.1:6379")


def make_redis_limiter():
    from service.gateway.limits_redis import RedisLimiter

    prefix = f"moe_serve_test:{uuid.uuid4().hex}"
    return RedisLimiter(REDIS_URL, prefix), prefix


async def drop_keys(limiter, prefix: str) -> None:
    keys = [key async for key in limiter._redis.scan_iter(match=f"{prefix}:*")]
    if keys:
        await limiter._redis.delete(*keys)
    await limiter.close()


@pytest.mark.parametrize(
    ("level", "updated", "now", "limit", "expected"),
    [
        (0, 0, 1, 60, 60),  # 1 ms refills `limit` units
        (0, 0, WINDOW_MS * 3, 60, 60 * WINDOW_MS),  # capped at a full bucket
        (10, 100, 50, 60, 10),  # clock went backwards: nothing refills
        (-600, 0, 5, 60, -300),  # debt refills like any level
    ],
)
def test_refill(level, updated, now, limit, expected):
    assert refill(level, updated, now, limit) == expected


@pytest.mark.parametrize(
    ("req", "tok", "rpm", "tpm", "tokens", "expected"),
    [
        (WINDOW_MS, 10 * WINDOW_MS, 1, 10, 10, (True, 0, 0, 0)),
        (WINDOW_MS - 1, 10 * WINDOW_MS, 1, 10, 1, (False, WINDOW_MS - 1, 10 * WINDOW_MS, 1)),
        (WINDOW_MS, 0, 1, 10, 5, (False, WINDOW_MS, 0, 5 * WINDOW_MS // 10)),
        (WINDOW_MS, 10 * WINDOW_MS, 1, 10, 11, (False, WINDOW_MS, 10 * WINDOW_MS, -1)),  # larger than the limit
    ],
)
def test_decide(req, tok, rpm, tpm, tokens, expected):
    assert decide(req, tok, rpm, tpm, tokens) == expected


ops = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "adjust"]),
        st.integers(0, 5000),  # ms since the previous op (0 = same millisecond)
        st.integers(-50, 120),  # tokens (negative only meaningful for adjust: a refund)
    ),
    min_size=1,
    max_size=25,
)


@given(ops=ops, rpm=st.integers(1, 30), tpm=st.integers(1, 500))
@settings(max_examples=60, deadline=None)
async def test_in_process_never_admits_past_the_limits(ops, rpm, tpm):
    """Over any schedule, admitted requests <= rpm + refill and admitted tokens <= tpm + refill + refunds."""
    limiter, now, admitted, tokens_in, refunds = InProcessLimiter(), 0, 0, 0, 0
    for kind, gap, tokens in ops:
        now += gap
        if kind == "adjust":
            await limiter.adjust("t", rpm, tpm, tokens, now)
            refunds += max(-tokens, 0)  # extra charges (tokens > 0) only lower the level, so they are not counted
            continue
        decision = await limiter.acquire("t", rpm, tpm, max(tokens, 0), now)
        if decision.allowed:
            admitted += 1
            tokens_in += max(tokens, 0)
        assert decision.remaining_requests >= 0 and decision.remaining_tokens >= 0
    assert admitted * WINDOW_MS <= rpm * WINDOW_MS + rpm * now
    assert tokens_in * WINDOW_MS <= tpm * WINDOW_MS + tpm * now + refunds * WINDOW_MS


@needs_redis
@given(ops=ops, rpm=st.integers(1, 30), tpm=st.integers(1, 500))
@example(ops=[("acquire", 0, 10), ("acquire", 0, 0)], rpm=2, tpm=10)  # a cost exactly equal to the level is admitted
@example(ops=[("acquire", 0, 0), ("acquire", 0, 0)], rpm=1, tpm=1)  # the last request of the minute
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_redis_matches_in_process(ops, rpm, tpm):
    """The Lua script and the Python rule give the same decision for every step of a random schedule."""
    redis_limiter, prefix = make_redis_limiter()
    local = InProcessLimiter()
    try:
        now = 1_700_000_000_000
        for kind, gap, tokens in ops:
            now += gap
            if kind == "adjust":
                await redis_limiter.adjust("t", rpm, tpm, tokens, now)
                await local.adjust("t", rpm, tpm, tokens, now)
            else:
                expected = await local.acquire("t", rpm, tpm, max(tokens, 0), now)
                assert await redis_limiter.acquire("t", rpm, tpm, max(tokens, 0), now) == expected
    finally:
        await drop_keys(redis_limiter, prefix)


@needs_redis
@pytest.mark.parametrize(
    ("rpm", "tpm", "cost", "expected"), [(50, 10**9, 1, 50), (10**6, 700, 5, 140), (10**6, 1000, 7, 142)]
)
async def test_redis_exact_under_200_concurrent_clients(rpm, tpm, cost, expected):
    """200 clients at the same instant, each on its own connection: exactly the limit is admitted."""
    limiters = [make_redis_limiter()[0] for _ in range(4)]  # 4 "gateway replicas" sharing the buckets
    prefix = f"moe_serve_test:{uuid.uuid4().hex}"
    for limiter in limiters:
        limiter._prefix = prefix
    now = 1_700_000_000_000
    try:
        decisions = await asyncio.gather(*(limiters[i % 4].acquire("tenant", rpm, tpm, cost, now) for i in range(200)))
        assert sum(d.allowed for d in decisions) == expected
        refused = [d for d in decisions if not d.allowed]
        assert all(d.retry_after_s and d.retry_after_s > 0 for d in refused)
    finally:
        await drop_keys(limiters[0], prefix)
        for limiter in limiters[1:]:
            await limiter.close()
