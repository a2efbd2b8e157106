"""Serving the gateway app with uvicorn, with the HTTP layer bounded too (body_limit.py bounds what comes after it).

uvicorn's HTTP/1.1 protocols wait for request headers forever, bound a request head only while it is incomplete in
their buffer (h11) or not at all (httptools), and answer a malformed head with a plain-text 400. The protocols here
close a connection whose request line and headers take longer than `header_timeout_s` (slow-header "slowloris"
clients hold a socket each, for free, otherwise), refuse a head over `max_header_bytes`, and answer in the OpenAI
error shape. httptools (C parser, chunked writes without h11's state machine) is used when installed: it is most of
the gateway's per-token CPU after the socket writes themselves; h11 otherwise.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json

from service.gateway.body_limit import EdgeConfig
from service.gateway.errors import error_body

REASONS = {400: b"Bad Request", 408: b"Request Timeout"}


class BoundedHead:
    """The request-head bounds, for either uvicorn protocol (mixed in before it)."""

    header_timeout_s: float = EdgeConfig.header_timeout_s  # set per server by `protocol_for`
    max_header_bytes: int = EdgeConfig.max_header_bytes

    def _waiting_for_head(self) -> bool:
        raise NotImplementedError

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[misc]
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _head_done(self) -> None:
        self._head_bytes = 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_head():
            end = data.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end
            if self._head_bytes > self.max_header_bytes:
                # h11 bounds only a head still incomplete in its buffer; one that arrives whole is bounded here.
                self._refuse(400, f"Request head exceeds {self.max_header_bytes} bytes.", "invalid_http_request")
                return
            self._arm_head_timer()  # a keep-alive connection starting its next request: its head is bounded too
        super().data_received(data)  # type: ignore[misc]
        if not self._waiting_for_head():
            self._head_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        super().connection_lost(exc)  # type: ignore[misc]

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._waiting_for_head():
            return
        if self._head_bytes:
            self._refuse(408, f"Request headers not received within {self.header_timeout_s:g} s.", "request_timeout")
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, f"Invalid HTTP request: {msg}", "invalid_http_request")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """An OpenAI-shaped error written straight to the socket (no response has started), then close."""
        body = json.dumps(error_body(status, message, code)).encode()
        head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        self.transport.write(head % (status, REASONS[status], len(body)) + body)
        self.transport.close()


def _h11_protocol() -> type:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(BoundedHead, H11Protocol):
        def _waiting_for_head(self) -> bool:
            return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE

    return BoundedH11Protocol


def _httptools_protocol() -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class BoundedHttpToolsProtocol(BoundedHead, HttpToolsProtocol):
        _in_head = True  # between requests, or inside a request line / headers

        def _waiting_for_head(self) -> bool:
            return self._in_head and (self.cycle is None or self.cycle.response_complete)

        def on_message_begin(self) -> None:
            self._in_head = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head = True

    return BoundedHttpToolsProtocol


def protocol_for(edges: EdgeConfig, impl: str = "auto") -> type:
    """The bounded protocol class: httptools when installed (or asked for), else h11."""
    if impl == "auto":
        impl = "httptools" if importlib.util.find_spec("httptools") else "h11"
    base = _httptools_protocol() if impl == "httptools" else _h11_protocol()
    bounds = {"header_timeout_s": edges.header_timeout_s, "max_header_bytes": edges.max_header_bytes}
    return type(base.__name__, (base,), bounds)


def uvicorn_config(app, host: str, port: int, edges: EdgeConfig, log_level: str = "info", impl: str = "auto"):
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol_for(edges, impl),
        h11_max_incomplete_event_size=edges.max_header_bytes,
        timeout_keep_alive=max(int(edges.keep_alive_s), 1),
        proxy_headers=False,  # the gateway reads no client address from X-Forwarded-*: not worth a layer per request
    )


def run(app, host: str, port: int, edges: EdgeConfig, log_level: str = "info") -> None:
    import uvicorn

    uvicorn.Server(uvicorn_config(app, host, port, edges, log_level)).run()
