"""What the gateway does when Redis (the shared limits store) goes away, and how it settles up when it comes back.

A configurable choice (`OutageConfig.mode`):
- "closed": requests are refused with 503 `limits_unavailable` (Retry-After) while the store is down. No tenant can
  exceed its limits, at the price of availability.
- "open" (default): for at most `fail_open_s` seconds per outage each gateway admits with its own in-process token
  buckets at `local_share` of every tenant's limits (set it to 1/N with N gateway replicas so that together they stay
  within the limits); past that bound it fails closed until the store answers again.

Never charged twice: every charge carries the request id, and the store's script is idempotent per rid
(limits_redis.py). A call whose reply is lost may or may not have run in Redis, so when the gateway falls back after a
failed `acquire` it queues a `cancel` of that rid: once the store is back, a charge that did land there is undone (the
request was charged in-process instead) and one that did not is a no-op. Settlements (`adjust`) of requests charged in
Redis that fail are queued too and replayed when it is back (once, by rid); requests charged in-process settle
in-process. The queue is bounded (`max_pending`, oldest dropped first: a dropped settlement leaves the admission
estimate charged, never a second charge).

While the store is down, one request per `retry_s` tries it (paying at most `timeout_s`); the others go straight to the
fallback, so an outage costs latency to one request a second, not to all. A watcher pings it every `retry_s` as well,
so the gateway notices it is back (and replays what it queued) even when no request comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from service.gateway.errors import GatewayError
from service.gateway.limits import Admission, InProcessLimiter
from service.gateway.limits_redis import RedisLimiter

logger = logging.getLogger(__name__)
MODES = ("open", "closed")


@dataclass(frozen=True)
class OutageConfig:
    mode: str = "open"  # "open": in-process limits for a bounded time; "closed": 503 while the store is down
    fail_open_s: float = 30.0  # seconds per outage the in-process limits stand in (mode "open"); then 503
    local_share: float = 1.0  # fraction of each tenant's RPM/TPM one gateway admits alone (1/N for N gateways)
    timeout_s: float = 1.0  # seconds a store call may take before it counts as an outage (a busy event loop
    # delays replies too: too short a bound turns load into false outages and fail-open admissions)
    retry_s: float = 1.0  # seconds between tries of a store that is down
    max_pending: int = 100_000  # settlements queued for a store that is down; the oldest are dropped beyond

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"limits outage mode {self.mode!r}: expected one of {MODES}")
        if not 0 < self.local_share <= 1 or min(self.fail_open_s, self.timeout_s, self.retry_s) <= 0:
            raise ValueError("limits outage: local_share in (0, 1], fail_open_s/timeout_s/retry_s > 0")


@dataclass(frozen=True)
class StoreStats:
    up: bool  # the last store call succeeded
    pending: int  # settlements and cancels waiting for the store
    local_admissions: int  # requests admitted by the in-process fallback, total


def _scaled(limit: int, share: float) -> int:
    return max(int(limit * share), 1)


class ResilientLimiter:
    """A RedisLimiter with the outage rule above; the same RateLimiter protocol to admission and relay."""

    def __init__(self, store: RedisLimiter, config: OutageConfig, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.config = config
        self.clock = clock
        self.local = InProcessLimiter()
        self._down_since: float | None = None  # monotonic seconds; None while the store answers
        self._next_try = 0.0  # monotonic seconds when a request may try the store again
        self._local_rids: OrderedDict[str, None] = OrderedDict()  # charged in-process, settle there
        self._pending: deque[tuple] = deque(maxlen=config.max_pending)  # ("adjust"|"cancel", args...)
        self._flushing: asyncio.Task | None = None
        self._flush_lock = asyncio.Lock()  # one replay at a time, in queue order
        self._watching: asyncio.Task | None = None  # pings the store while it is down
        self.local_admissions = 0

    def stats(self) -> StoreStats:
        return StoreStats(self._down_since is None, len(self._pending), self.local_admissions)

    # ---- store state --------------------------------------------------------------------------------------------
    def _may_try(self) -> bool:
        if self._down_since is None:
            return True
        now = self.clock()
        if now < self._next_try:
            return False
        self._next_try = now + self.config.retry_s  # this request probes; the others keep to the fallback meanwhile
        return True

    def _went_down(self, exc: BaseException) -> None:
        if self._down_since is None:
            logger.warning("limits store unreachable (%r): %s", exc, f"fail {self.config.mode}")
            self._down_since = self.clock()
        self._next_try = self.clock() + self.config.retry_s
        if self._watching is None or self._watching.done():
            self._watching = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while self._down_since is not None:
            await asyncio.sleep(self.config.retry_s)
            if self._down_since is None:
                return
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.store.ping(), self.config.timeout_s)
                self._came_back()

    def _came_back(self) -> None:
        if self._down_since is None:
            return
        logger.warning("limits store back after %.1f s", self.clock() - self._down_since)
        self._down_since = None
        if self._pending and (self._flushing is None or self._flushing.done()):
            self._flushing = asyncio.get_running_loop().create_task(self.flush())

    async def _try(self, call):
        """The store call's result, or raise after marking the store down (any error or a timeout)."""
        try:
            result = await asyncio.wait_for(call, self.config.timeout_s)
        except Exception as exc:  # redis errors, OSError, TimeoutError: all mean "not now"
            self._went_down(exc)
            raise
        self._came_back()
        return result

    # ---- RateLimiter ----------------------------------------------------------------------------------------------
    async def acquire(self, tenant: str, rpm: int, tpm: int, tokens: int, now_ms: int, rid: str = "") -> Admission:
        if self._may_try():
            try:
                return await self._try(self.store.acquire(tenant, rpm, tpm, tokens, now_ms, rid))
            except Exception:
                if rid:  # it may have run before the reply was lost: undo it there once the store is back
                    self._pending.append(("cancel", tenant, rpm, tpm, now_ms, rid))
        return await self._fallback(tenant, rpm, tpm, tokens, now_ms, rid)

    async def _fallback(self, tenant: str, rpm: int, tpm: int, tokens: int, now_ms: int, rid: str) -> Admission:
        down_for = self.clock() - (self._down_since if self._down_since is not None else self.clock())
        if self.config.mode == "closed" or down_for > self.config.fail_open_s:
            retry = max(int(self.config.retry_s), 1)
            raise GatewayError(
                503,
                "Rate-limit store unavailable; retry later.",
                code="limits_unavailable",
                headers={"Retry-After": str(retry)},
            )
        share = self.config.local_share
        decision = await self.local.acquire(tenant, _scaled(rpm, share), _scaled(tpm, share), tokens, now_ms)
        if decision.allowed:
            self.local_admissions += 1
            if rid:
                self._local_rids[rid] = None
                while len(self._local_rids) > self.config.max_pending:
                    self._local_rids.popitem(last=False)
        return decision

    async def adjust(self, tenant: str, rpm: int, tpm: int, delta_tokens: int, now_ms: int, rid: str = "") -> None:
        if rid in self._local_rids:
            del self._local_rids[rid]
            share = self.config.local_share
            await self.local.adjust(tenant, _scaled(rpm, share), _scaled(tpm, share), delta_tokens, now_ms)
            return
        if self._may_try():
            with contextlib.suppress(Exception):
                await self._try(self.store.adjust(tenant, rpm, tpm, delta_tokens, now_ms, rid))
                return
        self._pending.append(("adjust", tenant, rpm, tpm, delta_tokens, now_ms, rid))

    async def flush(self) -> int:
        """Replay queued cancels and settlements in order while the store answers; how many were applied."""
        applied = 0
        async with self._flush_lock:
            while self._pending:
                op, *args = self._pending[0]
                call = self.store.cancel(*args) if op == "cancel" else self.store.adjust(*args)
                try:
                    await self._try(call)
                except Exception:
                    return applied
                self._pending.popleft()
                applied += 1
        return applied

    async def close(self) -> None:
        for task in (self._flushing, self._watching):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.store.close()
