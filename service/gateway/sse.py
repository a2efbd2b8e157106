"""A streaming response that notices a client going away at once and closes its body iterator (so the engine
request is aborted), instead of waiting for the next write to fail or for garbage collection to close it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


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
