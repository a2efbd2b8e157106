"""HTTP to the engine replicas: aiohttp in production, an httpx transport as the tests' in-process seam.

Why aiohttp: the gateway's CPU per request was dominated by its engine client. Measured on this machine (client CPU,
400 streamed completions at 40 concurrent, SGLang test double): httpx 1.0-1.07 ms a request and ~22 us a relayed
token, aiohttp 0.13-0.15 ms and ~12 us (its HTTP parser is compiled). Both clients raise their own exception types;
callers see only `EngineHTTPError` / `EngineTimeout` from here.
"""

from __future__ import annotations

import contextlib
import json as jsonlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

KEEPALIVE_S = 2.0
# Idle engine connections are dropped after 2 s, before SGLang's server (uvicorn: 5 s) drops them: the other way round
# a request can go out on a connection the engine is closing at that moment, and fail.


class EngineHTTPError(Exception):
    """The engine could not be reached or broke the connection (refused, reset, malformed reply)."""


class EngineTimeout(EngineHTTPError):
    """No answer (or no next bytes of a stream) within the configured time."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


class StreamReply(Protocol):
    status: int

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...


class EngineHTTP(Protocol):
    async def request(
        self, method: str, url: str, *, json: dict | None = None, timeout: float | None = None
    ) -> Reply: ...

    def stream(self, url: str, json: dict) -> contextlib.AbstractAsyncContextManager[StreamReply]: ...

    async def close(self) -> None: ...


class AiohttpEngineHTTP:
    """One aiohttp session (made on first use, inside the serving event loop), unbounded connection pool."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, auto_decompress=False)
        return self._session

    async def request(self, method: str, url: str, *, json: dict | None = None, timeout: float | None = None) -> Reply:
        limit = aiohttp.ClientTimeout(total=timeout) if timeout is not None else None
        with _mapped_errors():
            async with self.session.request(method, url, json=json, timeout=limit) as response:
                return Reply(response.status, await response.read())

    @contextlib.asynccontextmanager
    async def stream(self, url: str, json: dict) -> AsyncIterator[StreamReply]:
        with _mapped_errors():
            async with self.session.post(url, json=json) as response:
                yield _AiohttpStream(response)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None


class _AiohttpStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def chunks(self) -> AsyncIterator[bytes]:
        with _mapped_errors():
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def read(self) -> bytes:
        with _mapped_errors():
            return await self._response.read()


@contextlib.contextmanager
def _mapped_errors():
    try:
        yield
    except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
        raise EngineTimeout(repr(exc)) from exc
    except aiohttp.ClientError as exc:
        raise EngineHTTPError(repr(exc)) from exc


class HttpxEngineHTTP:
    """The same interface over an httpx transport: tests reach an in-process engine double (ASGI) or a
    MockTransport through it. Production uses AiohttpEngineHTTP."""

    def __init__(self, transport, connect_timeout_s: float, read_timeout_s: float) -> None:
        import httpx

        self._httpx = httpx
        self._transport, self._timeout = transport, httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self._http = None  # made on first use, again after close() (an app's lifespan may run more than once)

    @property
    def _client(self):
        if self._http is None:
            self._http = self._httpx.AsyncClient(transport=self._transport, timeout=self._timeout)
        return self._http

    async def request(self, method: str, url: str, *, json: dict | None = None, timeout: float | None = None) -> Reply:
        extra = {"timeout": timeout} if timeout is not None else {}
        with self._mapped_errors():
            response = await self._client.request(method, url, json=json, **extra)
            return Reply(response.status_code, response.content)

    @contextlib.asynccontextmanager
    async def stream(self, url: str, json: dict) -> AsyncIterator[StreamReply]:
        with self._mapped_errors():
            async with self._client.stream("POST", url, json=json) as response:
                yield _HttpxStream(response, self._mapped_errors)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        self._http = None

    @contextlib.contextmanager
    def _mapped_errors(self):
        try:
            yield
        except self._httpx.TimeoutException as exc:
            raise EngineTimeout(repr(exc)) from exc
        except self._httpx.HTTPError as exc:
            raise EngineHTTPError(repr(exc)) from exc


class _HttpxStream:
    def __init__(self, response, mapped_errors) -> None:
        self._response, self._mapped = response, mapped_errors
        self.status = response.status_code

    async def chunks(self) -> AsyncIterator[bytes]:
        with self._mapped():
            async for chunk in self._response.aiter_bytes():
                yield chunk

    async def read(self) -> bytes:
        with self._mapped():
            return await self._response.aread()
