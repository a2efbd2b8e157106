"""A streaming response that notices a client going away at once and closes its body iterator (so the engine
request is aborted), instead of waiting for the next write to fail or for garbage collection to close it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class EngineEvent:
    """One SSE `data:` payload from the engine, parsed only when needed: most are token chunks relayed verbatim.

    A chunk is relayed as bytes unless it may carry something the gateway acts on: an error, SGLang's `sglext`
    (speculation stats, stripped before the client), moe-serve's per-request speculation `metrics` (only for clients
    that asked for them), or a usage object (token accounting). In JSON text a quote
    inside a string is escaped, so `"error"` etc. cannot match generated text; a false match only costs a parse.
    """

    __slots__ = ("raw", "_data")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw  # the JSON text after `data:`
        self._data: dict | None = None

    @property
    def data(self) -> dict:
        if self._data is None:
            parsed = json.loads(self.raw)
            self._data = parsed if isinstance(parsed, dict) else {}
        return self._data

    @property
    def plain(self) -> bool:
        raw = self.raw
        if b'"error"' in raw or b'"sglext"' in raw or b'"metrics"' in raw:
            return False
        return b'"usage"' not in raw or b'"usage":null' in raw

    @property
    def has_choices(self) -> bool:
        return b'"choices":[]' not in self.raw

    def is_error(self) -> bool:
        return b'"error"' in self.raw and ("error" in self.data or self.data.get("object") == "error")

    def frame(self) -> bytes:
        return b"data: " + self.raw + b"\n\n"


async def sse_payloads(chunks: AsyncIterator[bytes]) -> AsyncIterator[EngineEvent | None]:
    """`data:` payloads of an SSE byte stream, as they complete; None for `[DONE]`. Payloads that are not a JSON
    object are skipped."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                yield None
                async for _ in chunks:  # read to the end of the body, so the connection can be reused
                    pass
                return
            if payload.startswith(b"{"):
                yield EngineEvent(payload)


def sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class AbortOnDisconnectResponse(StreamingResponse):
    def __init__(self, *args, on_close: Callable[[], Awaitable[None]] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.on_close = on_close  # runs once the response is over, however it ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream_then_stop() -> None:
                    with contextlib.suppress(OSError):  # the socket closed under us: same as a disconnect
                        await self.stream_response(send)
                    group.cancel_scope.cancel()

                async def watch_disconnect() -> None:
                    await self.listen_for_disconnect(receive)
                    group.cancel_scope.cancel()

                group.start_soon(stream_then_stop)
                group.start_soon(watch_disconnect)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()
                if self.on_close is not None:
                    await self.on_close()
