"""Bounded work in flight: outstanding requests and tokens per engine replica and per tenant, refused early.

An engine queues what it cannot run at once; a gateway that forwards everything turns overload into unbounded queues
(engine memory, gateway sockets and coroutines) and TTFTs of minutes. Instead each replica admits at most
`queue_factor` times what it runs at once (its `max_running_requests`, and its KV capacity `max_total_num_tokens` in
tokens, read from SGLang's /server_info), and the gateway refuses the rest before any engine work:
503 `engine_overloaded` with Retry-After when the pool of healthy replicas is full, 429 `too_many_concurrent_*` when
one tenant holds its own share.

Priority classes: the distinct `priority` values of the registered tenants, ranked; the lowest class may fill the pool
up to `lowest_priority_fill`, the highest to 1.0, classes between linearly, so under overload the lowest priority is
refused first and the head-room left is kept for the higher ones:

    fill(rank) = 1 - (1 - lowest_priority_fill) * rank / (classes - 1)        (rank 0 = highest priority)

A request's token cost is the admission estimate (prompt estimate + max_tokens * n per prompt), released when the
request ends. A request larger than a whole bound is admitted when nothing else is outstanding, so it is never
refused forever.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from service.gateway.errors import GatewayError
from service.gateway.replicas import Replica
from service.gateway.tenants import Tenant


@dataclass(frozen=True)
class OverloadConfig:
    queue_factor: float = 2.0  # outstanding work per replica, in multiples of what the engine runs at once
    replica_requests: int | None = None  # requests per replica; None: engine's max_running_requests * queue_factor
    replica_tokens: int | None = None  # tokens per replica; None: engine's max_total_num_tokens * queue_factor
    fallback_requests: int = 256  # requests per replica when the engine does not say (not SGLang, not read yet)
    lowest_priority_fill: float = 0.8  # fraction of the pool the lowest priority class may fill (highest: 1.0)
    tenant_requests: int | None = None  # outstanding requests per tenant unless its config says; None: no own bound
    tenant_tokens: int | None = None  # outstanding tokens per tenant unless its config says; None: no own bound
    retry_after_s: int = 1  # seconds, Retry-After of a refusal (the shortest a streaming request frees a slot)

    def __post_init__(self) -> None:
        if self.queue_factor <= 0 or not 0 < self.lowest_priority_fill <= 1:
            raise ValueError("overload: queue_factor must be > 0 and lowest_priority_fill in (0, 1]")
        if self.retry_after_s < 1 or self.fallback_requests < 1:
            raise ValueError("overload: retry_after_s and fallback_requests must be >= 1")


def replica_bounds(replica: Replica, config: OverloadConfig) -> tuple[int, int | None]:
    """(requests, tokens or None = unbounded) this replica may hold outstanding."""
    requests = config.replica_requests
    if requests is None:
        known = replica.engine_max_running
        requests = math.ceil(known * config.queue_factor) if known else config.fallback_requests
    tokens = config.replica_tokens
    if tokens is None and replica.engine_kv_tokens:
        tokens = math.ceil(replica.engine_kv_tokens * config.queue_factor)
    return requests, tokens


def has_room(replica: Replica, config: OverloadConfig, cost: int) -> bool:
    requests, tokens = replica_bounds(replica, config)
    if replica.outstanding >= requests:
        return False
    return tokens is None or replica.outstanding_tokens == 0 or replica.outstanding_tokens + cost <= tokens


@dataclass
class Lease:
    """One admitted request's share of the pool; `InFlight.release` gives it back once."""

    tenant: str  # tenant name
    cost: int  # tokens reserved
    released: bool = False


class InFlight:
    """Requests and tokens admitted and not yet finished, in total and per tenant, against the live replica pool."""

    def __init__(self, config: OverloadConfig, replicas: list[Replica], clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.replicas = replicas
        self.clock = clock
        self.requests = 0  # requests admitted and not yet released
        self.tokens = 0  # tokens of those
        self.by_tenant: dict[str, list[int]] = {}  # tenant -> [requests, tokens]
        self._fills: tuple[tuple[int, ...], dict[int, float]] = ((), {})  # (priorities seen, priority -> fill)

    def pool(self) -> tuple[int, int | None]:
        """(requests, tokens or None) the healthy replicas not cooling down may hold together."""
        now = self.clock()
        requests, tokens = 0, 0
        for replica in self.replicas:
            if not replica.healthy or replica.down_until > now:
                continue
            r, t = replica_bounds(replica, self.config)
            requests += r
            tokens = None if tokens is None or t is None else tokens + t
        return requests, tokens

    def fill(self, priority: int, priorities: tuple[int, ...]) -> float:
        """The fraction of the pool a tenant of `priority` may fill, given the tenants' distinct priorities."""
        if self._fills[0] != priorities:
            ranked = sorted(set(priorities), reverse=True)
            step = (1.0 - self.config.lowest_priority_fill) / max(len(ranked) - 1, 1)
            self._fills = (priorities, {p: 1.0 - step * rank for rank, p in enumerate(ranked)})
        return self._fills[1].get(priority, self.config.lowest_priority_fill)

    def admit(self, tenant: Tenant, cost: int, priorities: tuple[int, ...]) -> Lease:
        """Reserve `cost` tokens and one request for `tenant`, or raise the refusal (429 tenant, 503 pool)."""
        held = self.by_tenant.get(tenant.name, (0, 0))
        retry = {"Retry-After": str(self.config.retry_after_s)}
        own_requests = tenant.max_in_flight or self.config.tenant_requests
        if own_requests is not None and held[0] + 1 > own_requests:
            raise GatewayError(
                429,
                f"Too many concurrent requests: {held[0]} in flight, your limit is {own_requests}.",
                code="too_many_concurrent_requests",
                headers=retry,
            )
        own_tokens = tenant.max_in_flight_tokens or self.config.tenant_tokens
        if own_tokens is not None and held[1] > 0 and held[1] + cost > own_tokens:
            raise GatewayError(
                429,
                f"Too many concurrent tokens: {held[1]} in flight, this request needs {cost}, your limit is {own_tokens}.",
                code="too_many_concurrent_tokens",
                headers=retry,
            )
        pool_requests, pool_tokens = self.pool()
        if pool_requests == 0:
            raise GatewayError(503, "No healthy engine replica.", code="engine_unavailable", headers=retry)
        share = self.fill(tenant.priority, priorities)
        over_requests = self.requests + 1 > share * pool_requests
        over_tokens = pool_tokens is not None and self.tokens > 0 and self.tokens + cost > share * pool_tokens
        if over_requests or over_tokens:
            what = f"{self.requests} requests" if over_requests else f"{self.tokens} tokens"
            raise GatewayError(
                503,
                f"Engines are at capacity ({what} outstanding); retry later.",
                code="engine_overloaded",
                headers=retry,
            )
        self.requests += 1
        self.tokens += cost
        counts = self.by_tenant.setdefault(tenant.name, [0, 0])
        counts[0] += 1
        counts[1] += cost
        return Lease(tenant.name, cost)

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self.requests -= 1
        self.tokens -= lease.cost
        counts = self.by_tenant[lease.tenant]
        counts[0] -= 1
        counts[1] -= lease.cost
        if counts[0] == 0:
            del self.by_tenant[lease.tenant]
