"""TEST DOUBLE: a scripted OpenAI-compatible streaming `/v1/completions` server, not a model.

It streams `max_tokens` one-word chunks after a fixed time to first token, with a fixed gap between tokens, then a
`usage` chunk (and an SGLang-style `sglext.spec_tokens_details` chunk when asked), so replay and load-test code can be
checked against known latencies. Requests whose prompt contains FAIL get HTTP 500. Used by tests/traces, the locust
test and bench/replay_lateness.py; run standalone with `python -m loadtest.scripted_server --port 0`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
from dataclasses import dataclass

from aiohttp import web


@dataclass(frozen=True)
class Script:
    ttft_s: float = 0.01  # seconds before the first token
    itl_s: float = 0.002  # seconds between tokens
    accept_length: float = 2.5  # spec_accept_length reported in sglext when asked


def create_app(script: Script) -> web.Application:
    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt", "")
        if "FAIL" in str(prompt):
            return web.json_response({"error": {"message": "scripted failure"}}, status=500)
        n_out = int(body.get("max_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(script.ttft_s)
        for i in range(n_out):
            if i:
                await asyncio.sleep(script.itl_s)
            await _event(resp, {"object": "text_completion", "choices": [{"index": 0, "text": f" t{i}"}]})
        if body.get("return_spec_tokens_details"):
            spec = {"spec_accept_length": script.accept_length, "spec_verify_ct": max(1, round(n_out / 2.5))}
            await _event(resp, {"choices": [], "sglext": {"spec_tokens_details": spec}})
        n_in = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        await _event(resp, {"choices": [], "usage": {"prompt_tokens": n_in, "completion_tokens": n_out}})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


async def _event(resp: web.StreamResponse, obj: dict) -> None:
    await resp.write(f"data: {json.dumps(obj)}\n\n".encode())


async def start(script: Script, port: int = 0) -> tuple[web.AppRunner, str]:
    """Start on 127.0.0.1 (port 0: any free port); returns the runner (call .cleanup()) and the base URL."""
    runner = web.AppRunner(create_app(script), access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    site = web.SockSite(runner, sock)
    await site.start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=10.0)
    parser.add_argument("--itl-ms", type=float, default=2.0)
    args = parser.parse_args()

    async def serve() -> None:
        _, url = await start(Script(ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000), args.port)
        print(url, flush=True)  # the caller reads the URL from the first line
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
