"""Run an ASGI app under uvicorn on 127.0.0.1 at a random free port, in a background thread (tests and bench)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import uvicorn


@contextmanager
def serve(app, *, log_level: str = "warning", edges=None, http_impl: str = "auto"):
    """Yield the base URL of `app` served by uvicorn; stop it on exit. `edges` (an EdgeConfig): serve it as
    `moe-serve gateway` does, with the bounded HTTP protocol of service/gateway/server.py."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if edges is None:
        config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=2)
    else:
        from service.gateway.server import uvicorn_config

        config = uvicorn_config(app, "127.0.0.1", 0, edges, log_level, http_impl)
        config.timeout_graceful_shutdown = 2
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
