"""`limits.py`'s rule as one Redis Lua script, so every gateway replica charges the same buckets atomically."""

from __future__ import annotations

from typing import Any

from service.gateway.limits import WINDOW_MS, Admission, admission

# KEYS: request bucket, token bucket (hashes {l = scaled level, t = updated ms}).
# ARGV: now_ms, rpm, tpm, tokens, mode ("acquire" | "adjust"), window_ms.
# Mirrors limits.refill/decide line for line; string.format('%d') keeps integers exact (tostring would round).
LUA = """
local now, rpm, tpm, tokens, mode, W = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
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
  local x = tok - tokens * W
  if x > tpm * W then x = tpm * W end
  save(KEYS[2], x, tok_t)
  return {1, 0, 0, 0}
end
local req, req_t = level(KEYS[1], rpm)
local need_req, need_tok = W, tokens * W
if tokens > tpm then return {0, req, tok, -1} end
if req >= need_req and tok >= need_tok then
  save(KEYS[1], req - need_req, req_t)
  save(KEYS[2], tok - need_tok, tok_t)
  return {1, req - need_req, tok - need_tok, 0}
end
local wait_req, wait_tok = 0, 0
if req < need_req then wait_req = math.ceil((need_req - req) / rpm) end
if tok < need_tok then wait_tok = math.ceil((need_tok - tok) / tpm) end
return {0, req, tok, math.max(wait_req, wait_tok)}
"""


class RedisLimiter:
    """Token buckets in Redis under `{prefix}:{tenant}:req|tok` (hash-tagged by tenant for Redis Cluster)."""

    def __init__(self, redis_url: str, key_prefix: str, *, client: Any = None) -> None:
        import redis.asyncio as redis_asyncio  # only a Redis deployment pays for the import

        self._redis = client if client is not None else redis_asyncio.from_url(redis_url)
        self._prefix = key_prefix
        self._script = self._redis.register_script(LUA)

    def _keys(self, tenant: str) -> list[str]:
        return [f"{self._prefix}:{{{tenant}}}:req", f"{self._prefix}:{{{tenant}}}:tok"]

    async def acquire(self, tenant: str, rpm: int, tpm: int, tokens: int, now_ms: int) -> Admission:
        allowed, req, tok, retry_ms = await self._script(
            keys=self._keys(tenant), args=[now_ms, rpm, tpm, tokens, "acquire", WINDOW_MS]
        )
        return admission(bool(allowed), int(req), int(tok), int(retry_ms))

    async def adjust(self, tenant: str, rpm: int, tpm: int, delta_tokens: int, now_ms: int) -> None:
        await self._script(keys=self._keys(tenant), args=[now_ms, rpm, tpm, delta_tokens, "adjust", WINDOW_MS])

    async def close(self) -> None:
        await self._redis.aclose()
