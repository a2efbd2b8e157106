"""ASGI middleware at the edge: a request body is read whole, within a size and a time bound, and checked before any
parsing, so bad input costs the gateway little and gets a 4xx in the OpenAI shape:

- over `max_body_bytes` (declared or sent): 413 `request_too_large`, without reading the rest;
- not complete within `body_timeout_s` (a client that never finishes sending): 408 `request_timeout`;
- not UTF-8 (JSON must be, RFC 8259 section 8.1): 400 `invalid_utf8`;
- JSON nested deeper than `max_json_depth`: 400 `json_too_deep` (Python's parser recurses and would fail with a 500
  near 1,000 levels; no OpenAI request nests beyond ~6).

Header floods and slow headers are bounded one layer down, in the HTTP protocol (server.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import numpy as np
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.gateway.errors import error_response

METHODS_WITH_BODY = {"POST", "PUT", "PATCH"}


@dataclass(frozen=True)
class EdgeConfig:
    body_timeout_s: float = 30.0  # seconds a client may take to send its whole body
    header_timeout_s: float = 10.0  # seconds a client may take to send its request line and headers
    max_header_bytes: int = 32 * 1024  # bytes of request line + headers; more gets 400 (HTTP layer, server.py)
    max_json_depth: int = 64  # nesting levels of arrays/objects in a request body
    keep_alive_s: float = 75.0  # seconds an idle keep-alive connection stays open: longer than clients keep theirs
    # (httpx 5 s, aiohttp 15 s), so the client closes first; the other way round a client can send a request on a
    # connection the gateway is closing at that moment, and it fails without ever reaching the gateway


class _Refused(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        self.status, self.message, self.code = status, message, code


def json_depth(body: bytes) -> int:
    """Deepest nesting of [] / {} outside JSON strings, in C-speed passes (a 4 MB body takes milliseconds)."""
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"")  # what is left of a backslash cannot end a string
    chars = np.frombuffer(text, dtype=np.uint8)
    outside = (np.cumsum(chars == ord('"')) % 2) == 0
    step = (chars == ord("[")).astype(np.int32) + (chars == ord("{")) - (chars == ord("]")) - (chars == ord("}"))
    return int(np.cumsum(step * outside).max(initial=0))


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, edges: EdgeConfig | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.edges = edges or EdgeConfig()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in METHODS_WITH_BODY:
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
            self._check(body)
        except _Refused as refused:
            # The rest of the body was not read: the connection cannot carry another request, so it is closed.
            close = {"Connection": "close"}
            await error_response(refused.status, refused.message, refused.code, headers=close)(scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # after the body: http.disconnect when the client leaves
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise _Refused(413, f"Request body exceeds {self.max_bytes} bytes.", "request_too_large")
        chunks, seen = [], 0
        with anyio.move_on_after(self.edges.body_timeout_s) as deadline:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Refused(400, "Client disconnected before sending its body.", "client_disconnected")
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > self.max_bytes:
                    raise _Refused(413, f"Request body exceeds {self.max_bytes} bytes.", "request_too_large")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        if deadline.cancelled_caught:
            raise _Refused(408, f"Request body not received within {self.edges.body_timeout_s:g} s.", "request_timeout")
        return b"".join(chunks)

    def _check(self, body: bytes) -> None:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Refused(400, f"Request body is not valid UTF-8 (byte {exc.start}).", "invalid_utf8") from exc
        brackets = body.count(b"[") + body.count(b"{")  # an upper bound of the depth, free to compute
        if brackets > self.edges.max_json_depth and json_depth(body) > self.edges.max_json_depth:
            raise _Refused(400, f"JSON nested deeper than {self.edges.max_json_depth} levels.", "json_too_deep")
