"""Serving the gateway app with uvicorn, with the HTTP layer bounded too (body_limit.py bounds what comes after it).

uvicorn's HTTP/1.1 protocol (h11) waits for request headers forever and answers a malformed or oversized request
head with a plain-text 400. `GatewayH11Protocol` closes a connection whose request line and headers take longer than
`header_timeout_s` (slow-header "slowloris" clients hold a socket each, for free, otherwise) and answers both cases
in the OpenAI error shape. Oversized heads (`max_header_bytes`, h11's incomplete-event bound) get that 400 too.
"""

from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.gateway.body_limit import EdgeConfig
from service.gateway.errors import error_body


def _error_bytes(status: int, message: str, code: str) -> bytes:
    return json.dumps(error_body(status, message, code)).encode()


class GatewayH11Protocol(H11Protocol):
    header_timeout_s: float = EdgeConfig.header_timeout_s  # set per server by `protocol_for`
    max_header_bytes: int = EdgeConfig.max_header_bytes

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._arm_head_timer()

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            end = data.find(b"\r\n\r\n")
            self._head_bytes += len(data) if end < 0 else end
            if self._head_bytes > self.max_header_bytes:
                # h11 bounds only a head still incomplete in its buffer; one that arrives whole is bounded here.
                self._send_error(400, f"Request head exceeds {self.max_header_bytes} bytes.", "invalid_http_request")
                self.transport.close()
                return
            self._arm_head_timer()  # a keep-alive connection starting its next request: its head is bounded too
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._head_bytes = 0
            self._disarm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self._head_bytes and self.conn.our_state is h11.IDLE:
            message = f"Request headers not received within {self.header_timeout_s:g} s."
            self._send_error(408, message, "request_timeout")
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._send_error(400, f"Invalid HTTP request: {msg}", "invalid_http_request")
        self.transport.close()

    def _send_error(self, status: int, message: str, code: str) -> None:
        body = _error_bytes(status, message, code)
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:
            pass  # a response was already under way: closing is all that is left


def protocol_for(edges: EdgeConfig) -> type[GatewayH11Protocol]:
    bounds = {"header_timeout_s": edges.header_timeout_s, "max_header_bytes": edges.max_header_bytes}
    return type("BoundedH11Protocol", (GatewayH11Protocol,), bounds)


def uvicorn_config(app, host: str, port: int, edges: EdgeConfig, log_level: str = "info"):
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol_for(edges),
        h11_max_incomplete_event_size=edges.max_header_bytes,
        timeout_keep_alive=max(int(edges.keep_alive_s), 1),
        proxy_headers=False,  # the gateway reads no client address from X-Forwarded-*: not worth a layer per request
    )


def run(app, host: str, port: int, edges: EdgeConfig, log_level: str = "info") -> None:
    import uvicorn

    uvicorn.Server(uvicorn_config(app, host, port, edges, log_level)).run()
