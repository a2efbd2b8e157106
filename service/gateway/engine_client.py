"""The gateway's only view of the engine: `submit / stream / abort` over SGLang's OpenAI-compatible HTTP API.

Engine API chosen (issue 5, item 3): SGLang's `/v1/completions` and `/v1/chat/completions`, because they take the chat
template, stop handling and usage accounting on the engine side, so the gateway needs no tokenizer and works with any
SGLang server. Per-request fields SGLang accepts there and the gateway sets (never the tenant):
`rid` (our request id, so `/abort_request` can name it), `priority` (tenant priority), `custom_params`
(`{"moe_serve": hints}`, see hints.py; SGLang copies it into SamplingParams.custom_params where the plugin reads it),
`return_spec_tokens_details` (speculation stats relayed into our metrics, `sglext` stripped before the client sees it).

A replica that fails (connection error, 5xx, error event) before sending any token sits out `failure_cooldown_s` and the
request is retried once on each other healthy replica; after the first token a failure reaches the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from service.gateway.config import EngineConfig
from service.gateway.engine_http import AiohttpEngineHTTP, EngineHTTP, EngineHTTPError, EngineTimeout, HttpxEngineHTTP
from service.gateway.overload import OverloadConfig, has_room
from service.gateway.replicas import Replica, ReplicaStats, pick_replica
from service.gateway.sse import EngineEvent, sse_payloads

logger = logging.getLogger(__name__)


class EngineUnavailable(Exception):
    """No replica could take the request (all down or all at their outstanding bound): the gateway answers 503."""


class EngineRejected(Exception):
    """The engine refused the request itself (4xx): no retry, the gateway relays the status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _ReplicaFailed(Exception):
    """Internal: this replica failed before any token; try another."""


def _error_message(payload: Any, fallback: str) -> str:
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    return fallback


def _error_status(payload: dict) -> int:
    inner = payload.get("error", payload)
    code = inner.get("code") if isinstance(inner, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else 500


class EngineClient:
    def __init__(
        self,
        config: EngineConfig,
        *,
        overload: OverloadConfig | None = None,
        transport=None,
    ) -> None:
        """`transport`: an httpx transport (tests: an in-process engine double); production leaves it None and
        talks aiohttp (engine_http.py says why)."""
        if not config.urls:
            raise ValueError("engine: at least one replica URL is required")
        self.config = config
        self.overload = overload or OverloadConfig()
        self.replicas = [Replica(url.rstrip("/")) for url in config.urls]
        timeouts = (config.connect_timeout_s, config.read_timeout_s)
        self._http: EngineHTTP = (
            AiohttpEngineHTTP(*timeouts) if transport is None else HttpxEngineHTTP(transport, *timeouts)
        )
        self._inflight: dict[str, Replica] = {}  # rid -> replica serving it, for abort()
        self._health_task: asyncio.Task | None = None
        self.models: tuple[str, ...] = ()  # model ids the replicas list at /v1/models, refreshed by probes

    # ---- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.probe_all()
        self._health_task = asyncio.create_task(self._health_loop())

    async def close(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        self._health_task = None
        await self._http.close()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            await self.probe_all()

    async def probe_all(self) -> None:
        await asyncio.gather(*(self._probe(r) for r in self.replicas))

    async def _probe(self, replica: Replica) -> None:
        try:
            health = await self._http.request("GET", f"{replica.url}/health", timeout=self.config.health_timeout_s)
            if health.status == 200 and not replica.healthy:
                # Back from down (restarted: SGLang answers 503 until it has started): a failure before is explained
                # by the outage, so it serves again now rather than after its cooldown.
                replica.down_until, replica.failing = 0.0, 0
            replica.healthy = health.status == 200
            replica.slow_probes = 0
            if not replica.healthy:
                replica.engine_max_running = replica.engine_kv_tokens = None  # a restarted engine may differ
                return
            if replica.engine_max_running is None:
                await self._read_capacity(replica)
            if not self.models:
                listed = await self._http.request(
                    "GET", f"{replica.url}/v1/models", timeout=self.config.connect_timeout_s
                )
                if listed.status == 200:
                    self.models = tuple(m["id"] for m in listed.json().get("data", []) if "id" in m)
        except EngineTimeout:
            # A replica that answers slowly is busy, not down (a CPU engine under load can take seconds to answer
            # /health): it is taken out only after consecutive timeouts. A refusal or an error status counts at once.
            replica.slow_probes += 1
            replica.healthy = replica.slow_probes < self.config.slow_probes_before_unhealthy
        except (EngineHTTPError, ValueError, KeyError, TypeError):
            replica.healthy = False
            replica.engine_max_running = replica.engine_kv_tokens = None

    async def _read_capacity(self, replica: Replica) -> None:
        """What the engine runs at once and its KV size, from SGLang's /server_info (overload.py's defaults).
        An engine without it (another OpenAI server) keeps None: the configured fallback bound applies."""
        info = await self._http.request("GET", f"{replica.url}/server_info", timeout=self.config.health_timeout_s)
        if info.status != 200:
            return
        payload = info.json()
        states = payload.get("internal_states") or [{}]
        running = states[0].get("max_running_requests") if isinstance(states[0], dict) else None
        running = running or payload.get("max_running_requests")
        kv = payload.get("max_total_num_tokens")
        replica.engine_max_running = running if isinstance(running, int) and running > 0 else None
        replica.engine_kv_tokens = kv if isinstance(kv, int) and kv > 0 else None

    def stats(self) -> list[ReplicaStats]:
        return [ReplicaStats(r.url, r.outstanding, r.healthy, r.served, r.failures) for r in self.replicas]

    def any_healthy(self) -> bool:
        now = time.monotonic()
        return any(r.healthy and r.down_until <= now for r in self.replicas)

    # ---- requests --------------------------------------------------------------------------------------------
    def _pick(self, tried: set[str], cost: int) -> Replica:
        replica = pick_replica(self.replicas, tried, lambda r: has_room(r, self.overload, cost), time.monotonic())
        if replica is None:
            if tried:
                raise EngineUnavailable("every engine replica failed this request")
            if self.any_healthy():
                raise EngineUnavailable("engine overloaded: every replica is at its outstanding-request limit")
            raise EngineUnavailable("no healthy engine replica")
        return replica

    def _fail(self, replica: Replica, why: str) -> None:
        logger.warning("engine replica %s failed before the first token: %s", replica.url, why)
        replica.failures += 1
        replica.failing += 1
        if replica.failing >= self.config.failures_before_cooldown:
            replica.down_until = time.monotonic() + self.config.failure_cooldown_s

    def _take(self, tried: set[str], cost: int, rid: str) -> Replica:
        replica = self._pick(tried, cost)
        tried.add(replica.url)
        replica.outstanding += 1
        replica.outstanding_tokens += cost
        replica.served += 1
        self._inflight[rid] = replica
        return replica

    def _give_back(self, replica: Replica, cost: int, rid: str) -> None:
        replica.outstanding -= 1
        replica.outstanding_tokens -= cost
        self._inflight.pop(rid, None)

    async def submit(self, path: str, body: dict, cost: int = 0) -> dict:
        """One non-streaming call; retried on another replica while no answer came back. `cost`: tokens it may use."""
        tried: set[str] = set()
        rid = body.get("rid", "")
        while True:
            replica = self._take(tried, cost, rid)
            try:
                response = await self._http.request("POST", f"{replica.url}{path}", json=body)
                payload = response.json()
                if response.status >= 500:
                    raise _ReplicaFailed(f"HTTP {response.status}: {_error_message(payload, response.text)}")
                if response.status >= 400:
                    raise EngineRejected(response.status, _error_message(payload, response.text))
                replica.failing = 0
                return payload
            except (EngineHTTPError, ValueError, _ReplicaFailed) as exc:
                self._fail(replica, repr(exc))
            finally:
                self._give_back(replica, cost, rid)

    async def stream(self, path: str, body: dict, cost: int = 0) -> AsyncIterator[EngineEvent]:
        """SSE events of one streaming call (parsed when looked into), up to but not including `[DONE]`.

        Closing this iterator early (the client went away) closes the engine connection and sends `/abort_request`.
        """
        rid = body.get("rid", "")
        tried: set[str] = set()
        while True:
            replica = self._take(tried, cost, rid)
            sent_any = False
            finished = False
            try:
                async with self._http.stream(f"{replica.url}{path}", json=body) as response:
                    if response.status >= 400:
                        raw = await response.read()
                        try:
                            message = _error_message(json.loads(raw), raw.decode(errors="replace"))
                        except ValueError:
                            message = raw.decode(errors="replace")
                        if response.status >= 500:
                            raise _ReplicaFailed(f"HTTP {response.status}: {message}")
                        raise EngineRejected(response.status, message)
                    async for event in sse_payloads(response.chunks()):
                        if event is None:
                            finished = True  # what follows [DONE] is drained, and the connection kept
                            continue
                        if event.is_error():
                            status = _error_status(event.data)
                            if sent_any:
                                finished = True  # the engine ended this request itself
                                yield event
                                return
                            if status >= 500:
                                raise _ReplicaFailed(f"error event: {_error_message(event.data, 'engine error')}")
                            raise EngineRejected(status, _error_message(event.data, "engine rejected the request"))
                        if not sent_any:
                            replica.failing = 0
                        sent_any = True
                        yield event
                    finished = True
                    return
            except EngineRejected:
                finished = True  # the engine refused it: nothing runs there to abort
                raise
            except (EngineHTTPError, _ReplicaFailed) as exc:
                if sent_any:
                    finished = True  # the engine already gave up; nothing to abort
                    raise EngineUnavailable(f"engine replica failed mid-stream: {exc!r}") from exc
                self._fail(replica, repr(exc))
                finished = True
            finally:
                self._give_back(replica, cost, rid)
                if not finished and rid:
                    # Cancelled or closed early: tell the engine, even inside a cancelled scope.
                    with anyio.CancelScope(shield=True):
                        await self._abort_on(replica, rid)

    async def abort(self, rid: str) -> bool:
        """Abort an in-flight request by rid; False if the gateway does not know it."""
        replica = self._inflight.get(rid)
        if replica is None:
            return False
        await self._abort_on(replica, rid)
        return True

    async def _abort_on(self, replica: Replica, rid: str) -> None:
        try:
            await self._http.request(
                "POST", f"{replica.url}/abort_request", json={"rid": rid}, timeout=self.config.connect_timeout_s
            )
        except EngineHTTPError as exc:
            logger.warning("abort of %s on %s failed: %r", rid, replica.url, exc)
