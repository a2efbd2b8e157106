"""`limits.py`'s rule as one Redis Lua script, so every gateway replica charges the same buckets atomically."""

from __future__ import annotations

from typing import Any

from service.gateway.limits import WINDOW_MS, Admission, admission

# KEYS: request bucket, token bucket (hashes {l = scaled level, t = updated ms}), charge record of one request (hash
# {c = tokens charged}; exists from an admitted `acquire` until its `adjust` or `cancel`).
# ARGV: now_ms, rpm, tpm, tokens, mode ("acquire" | "adjust" | "cancel"), window_ms, has_rid ("1" | ""), record ttl ms.
# Mirrors limits.refill/decide line for line; string.format('%d') keeps integers exact (tostring would round).
# With a rid every mode is idempotent, so a call whose reply was lost (a Redis outage) can be sent again safely:
# acquire admits a rid once, adjust applies once, cancel undoes an admission once (limits_outage.py).
LUA = """
local now, rpm, tpm, tokens, mode, W = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local rid, ttl = ARGV[7] == '1', tonumber(ARGV[8])
local function level(key, limit)
  local v = redis.call('HMGET', key, 'l', 't')
  if not v[1] then return limit * W, now end
  local l, t = tonumber(v[1]), tonumber(v[2])
  local dt = now - t
  if dt < 0 then dt = 0 end
  if dt > W then dt = W end
  local x = l + dt * limit
  if x > limit * W then x = limit * W end
  if t > now then return x, t end
  return x, now
end
local function save(key, l, t)
  redis.call('HSET', key, 'l', string.format('%d', l), 't', string.format('%d', t))
  redis.call('PEXPIRE', key, 2 * W)
end
local tok, tok_t = level(KEYS[2], tpm)
if mode == 'adjust' then
  if rid then
    if redis.call('EXISTS', KEYS[3]) == 0 then return {0, 0, 0, 0} end
    redis.call('DEL', KEYS[3])
  end
  local x = tok - tokens * W
  if x > tpm * W then x = tpm * W end
  save(KEYS[2], x, tok_t)
  return {1, 0, 0, 0}
end
local req, req_t = level(KEYS[1], rpm)
if mode == 'cancel' then
  local charged = redis.call('HGET', KEYS[3], 'c')
  if not charged then return {0, 0, 0, 0} end
  redis.call('DEL', KEYS[3])
  save(KEYS[1], math.min(req + W, rpm * W), req_t)
  save(KEYS[2], math.min(tok + tonumber(charged) * W, tpm * W), tok_t)
  return {1, 0, 0, 0}
end
if rid and redis.call('EXISTS', KEYS[3]) == 1 then return {1, req, tok, 0} end
local need_req, need_tok = W, tokens * W
if tokens > tpm then return {0, req, tok, -1} end
if req >= need_req and tok >= need_tok then
  save(KEYS[1], req - need_req, req_t)
  save(KEYS[2], tok - need_tok, tok_t)
  if rid then
    redis.call('HSET', KEYS[3], 'c', string.format('%d', tokens))
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
  return {1, req - need_req, tok - need_tok, 0}
end
local wait_req, wait_tok = 0, 0
if req < need_req then wait_req = math.ceil((need_req - req) / rpm) end
if tok < need_tok then wait_tok = math.ceil((need_tok - tok) / tpm) end
return {0, req, tok, math.max(wait_req, wait_tok)}
"""

RECORD_TTL_MS = 3_600_000  # a request's charge record outlives any request (engine read timeout: 600 s); an expired
# record only means its final correction is skipped: the estimate stays charged, never twice


class RedisLimiter:
    """Token buckets in Redis under `{prefix}:{tenant}:req|tok`, one charge record per request under
    `{prefix}:{tenant}:op:{rid}` (all hash-tagged by tenant for Redis Cluster).

    Calls raise redis/OS errors as they come: outage handling is limits_outage.py's. `timeout_s` bounds each call's
    socket waits. The client retries once, at once: after a Redis restart every pooled connection is stale and fails
    on first use, and a retry on a fresh one is safe because every call is idempotent by rid."""

    def __init__(self, redis_url: str, key_prefix: str, *, client: Any = None, timeout_s: float | None = None) -> None:
        import redis.asyncio as redis_asyncio  # only a Redis deployment pays for the import
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if client is None:
            client = redis_asyncio.from_url(
                redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1)
            )
        self._redis = client
        self._prefix = key_prefix
        self._script = self._redis.register_script(LUA)

    def _keys(self, tenant: str, rid: str) -> list[str]:
        base = f"{self._prefix}:{{{tenant}}}"
        return [f"{base}:req", f"{base}:tok", f"{base}:op:{rid}"]

    async def _call(self, tenant: str, rid: str, args: list) -> list:
        return await self._script(keys=self._keys(tenant, rid), args=[*args, "1" if rid else "", RECORD_TTL_MS])

    async def acquire(self, tenant: str, rpm: int, tpm: int, tokens: int, now_ms: int, rid: str = "") -> Admission:
        allowed, req, tok, retry_ms = await self._call(tenant, rid, [now_ms, rpm, tpm, tokens, "acquire", WINDOW_MS])
        return admission(bool(allowed), int(req), int(tok), int(retry_ms))

    async def adjust(self, tenant: str, rpm: int, tpm: int, delta_tokens: int, now_ms: int, rid: str = "") -> None:
        await self._call(tenant, rid, [now_ms, rpm, tpm, delta_tokens, "adjust", WINDOW_MS])

    async def cancel(self, tenant: str, rpm: int, tpm: int, now_ms: int, rid: str) -> bool:
        """Undo the admission charged under `rid` (its request and its tokens), if it exists; True if it did."""
        done, *_ = await self._call(tenant, rid, [now_ms, rpm, tpm, 0, "cancel", WINDOW_MS])
        return bool(done)

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        await self._redis.aclose()
