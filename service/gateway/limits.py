"""Per-tenant RPM and TPM limits as two token buckets, checked and charged in one atomic step.

Rule (issue 5, item 2): a bucket of capacity C (the per-minute limit) refills at C per 60 s. A request costing 1 request
and t tokens is admitted iff the request bucket holds >= 1 and the token bucket holds >= t; both are then charged
together, so concurrent gateways can never admit past either limit. After the response the token charge is corrected
to the real usage (`adjust`), which may leave the token bucket in debt: later requests wait for it.

Arithmetic is in integers so Redis (Lua doubles) and Python agree bit for bit: time in milliseconds, levels scaled by
60_000, so a bucket of capacity C holds C * 60_000 units and refills C units per millisecond.

Two stores share that rule: `RedisLimiter` (one Lua script; N gateway replicas share it) and `InProcessLimiter` (the
single-node embedded default). Time is passed in (`now_ms`), never read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

WINDOW_MS = 60_000  # a limit is "per minute"


@dataclass(frozen=True)
class Admission:
    allowed: bool  # whether the request was admitted (and charged)
    remaining_requests: int  # requests, whole, left in the bucket after this decision
    remaining_tokens: int  # tokens, whole, left in the bucket after this decision (0 when in debt)
    retry_after_s: float | None  # seconds until this request would fit; None if it never can (cost > limit)


class RateLimiter(Protocol):
    """`rid` names the charge, so a store that may be asked twice (a reply lost in a Redis outage) charges once."""

    async def acquire(self, tenant: str, rpm: int, tpm: int, tokens: int, now_ms: int, rid: str = "") -> Admission: ...

    async def adjust(self, tenant: str, rpm: int, tpm: int, delta_tokens: int, now_ms: int, rid: str = "") -> None: ...

    async def close(self) -> None: ...


def refill(level: int, updated_ms: int, now_ms: int, limit: int) -> int:
    """Bucket level (scaled units) at now_ms; a clock that went backwards refills nothing."""
    elapsed = min(max(now_ms - updated_ms, 0), WINDOW_MS)
    return min(level + elapsed * limit, limit * WINDOW_MS)


def decide(req_level: int, tok_level: int, rpm: int, tpm: int, tokens: int) -> tuple[bool, int, int, int]:
    """(admitted, new request level, new token level, retry-after ms or -1 for never), levels already refilled."""
    need_req, need_tok = WINDOW_MS, tokens * WINDOW_MS
    if tokens > tpm:
        return False, req_level, tok_level, -1
    if req_level >= need_req and tok_level >= need_tok:
        return True, req_level - need_req, tok_level - need_tok, 0
    wait_req = -(-(need_req - req_level) // rpm) if req_level < need_req else 0
    wait_tok = -(-(need_tok - tok_level) // tpm) if tok_level < need_tok else 0
    return False, req_level, tok_level, max(wait_req, wait_tok)


def admission(allowed: bool, req_level: int, tok_level: int, retry_ms: int) -> Admission:
    return Admission(
        allowed=allowed,
        remaining_requests=max(req_level, 0) // WINDOW_MS,
        remaining_tokens=max(tok_level, 0) // WINDOW_MS,
        retry_after_s=None if retry_ms < 0 else retry_ms / 1000.0,
    )


class InProcessLimiter:
    """The rule above over a dict; atomic because the event loop runs one coroutine step at a time."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[str, str], tuple[int, int]] = {}  # (tenant, kind) -> (scaled level, updated ms)

    def _level(self, tenant: str, kind: str, limit: int, now_ms: int) -> tuple[int, int]:
        level, updated = self._buckets.get((tenant, kind), (limit * WINDOW_MS, now_ms))
        return refill(level, updated, now_ms, limit), max(updated, now_ms)

    async def acquire(self, tenant: str, rpm: int, tpm: int, tokens: int, now_ms: int, rid: str = "") -> Admission:
        req, req_t = self._level(tenant, "req", rpm, now_ms)
        tok, tok_t = self._level(tenant, "tok", tpm, now_ms)
        allowed, req, tok, retry_ms = decide(req, tok, rpm, tpm, tokens)
        if allowed:
            self._buckets[(tenant, "req")] = (req, req_t)
            self._buckets[(tenant, "tok")] = (tok, tok_t)
        return admission(allowed, req, tok, retry_ms)

    async def adjust(self, tenant: str, rpm: int, tpm: int, delta_tokens: int, now_ms: int, rid: str = "") -> None:
        tok, tok_t = self._level(tenant, "tok", tpm, now_ms)
        self._buckets[(tenant, "tok")] = (min(tok - delta_tokens * WINDOW_MS, tpm * WINDOW_MS), tok_t)

    async def close(self) -> None:
        self._buckets.clear()
