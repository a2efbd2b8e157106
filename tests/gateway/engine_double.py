"""TEST DOUBLE of an SGLang HTTP server: a scripted fake, not an engine. It generates no real text.

It mimics the parts of SGLang 0.5.23's HTTP API the gateway uses — `/v1/completions`, `/v1/chat/completions` (JSON and
SSE with `data: [DONE]`, usage chunk with `stream_options.include_usage`, `sglext.spec_tokens_details`, moe-serve's
`metrics.speculative_decoding` (top-level, or in the usage chunk of a stream)), `/health`,
`/v1/models`, `/get_model_info`, `/abort_request`, and the context-length 400 — and records what it was sent, so tests
can check what reached the engine, which requests were aborted and which streams the gateway closed.
Output: token i of a reply is the string `" t{i}"`; a prompt is counted as one token per whitespace-separated word.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from service.gateway.sse import sse


@dataclass
class Script:
    """How the double behaves; tests change fields between requests."""

    model: str = "tiny-moe"  # model id listed at /v1/models
    default_tokens: int = 8  # tokens, when the request has no max_tokens
    token_delay_s: float = 0.0  # seconds between streamed tokens
    first_token_delay_s: float = 0.0  # seconds before the first token
    context_len: int = 64  # tokens (words) a prompt may have
    fail_status: int | None = None  # answer every generation request with this HTTP status
    healthy: bool = True  # /health answers 200 when true, 503 otherwise
    spec_details: bool = True  # include sglext.spec_tokens_details when asked
    stream_error: str | None = None  # streaming: answer 200 then one error event with this message (SGLang does this
    # for errors raised after the stream opened)
    die_after_tokens: int | None = None  # streaming: drop the connection after this many tokens
    max_running: int | None = None  # requests generated at once (the rest wait, as in SGLang); None: unbounded
    kv_tokens: int | None = None  # KV-cache size reported at /server_info (max_total_num_tokens)


@dataclass
class Record:
    """What the double saw."""

    requests: list[dict] = field(default_factory=list)  # bodies of generation requests, in arrival order
    headers: list[dict] = field(default_factory=list)  # their HTTP headers, same order
    aborts: list[str] = field(default_factory=list)  # rids sent to /abort_request
    disconnects: list[str] = field(default_factory=list)  # rids whose stream the caller closed before the end
    completed: list[str] = field(default_factory=list)  # rids streamed or answered to the end


def _prompt_words(body: dict) -> int:
    if "messages" in body:
        texts = []
        for m in body["messages"]:
            content = m.get("content") or ""
            texts.append(content if isinstance(content, str) else " ".join(p.get("text", "") for p in content))
        return sum(len(t.split()) for t in texts) + 4 * len(body["messages"])
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return len(prompt.split())
    if prompt and isinstance(prompt[0], str):
        return sum(len(p.split()) for p in prompt)
    return len(prompt) if prompt and isinstance(prompt[0], int) else sum(len(p) for p in prompt)


def _spec(n_tokens: int) -> dict:
    steps = max((n_tokens + 1) // 2, 1)
    return {
        "spec_accept_rate": 0.5,
        "spec_accept_length": n_tokens / steps,
        "spec_num_proposed_drafts": 2 * steps,
        "spec_num_correct_drafts": n_tokens - steps,
        "spec_verify_ct": steps,
    }


def _stats(body: dict, n_tokens: int) -> dict:
    """A per-request summary shaped as the moe-serve plugin's (moe_sglang/request_stats.py): one decode step per
    token after the first, at the K the hints allow (2 when they set none), nothing accepted."""
    hints = (body.get("custom_params") or {}).get("moe_serve") or {}
    k, steps = hints.get("max_k", 2), max(n_tokens - 1, 0)
    return {
        "mean_acceptance_length": 1.0,
        "draft_acceptance_rate": 0.0,
        "acceptance_histogram": [steps if k else 0] + [0] * k,
        "num_spec_steps": steps if k else 0,
        "num_draft_tokens": k * steps,
        "num_accepted_draft_tokens": 0,
        "num_spec_tokens": k,
        "policy": hints.get("policy"),
        "k_chosen_histogram": [0] * k + [steps] if k else [steps],
        "num_decode_steps": steps,
        "num_steps_k0": 0 if k else steps,
    }


def create_engine_double(script: Script | None = None, record: Record | None = None) -> FastAPI:
    script = script or Script()
    record = record or Record()
    app = FastAPI(title="SGLang engine TEST DOUBLE")
    app.state.script = script
    app.state.record = record

    @app.get("/health")
    async def health():
        return Response(status_code=200 if script.healthy else 503)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": script.model, "object": "model", "owned_by": "sglang"}]}

    @app.get("/server_info")
    async def server_info():
        # The two fields of SGLang's /server_info the gateway reads (overload.py); SGLang nests max_running_requests
        # in internal_states (per data-parallel rank).
        return {
            "max_total_num_tokens": script.kv_tokens,
            "internal_states": [{"max_running_requests": script.max_running}],
        }

    running = {"slots": None}  # the semaphore of max_running, made inside the serving loop

    @contextlib.asynccontextmanager
    async def slot():
        if script.max_running is None:
            yield
            return
        if running["slots"] is None:
            running["slots"] = asyncio.Semaphore(script.max_running)
        async with running["slots"]:
            yield

    @app.get("/get_model_info")
    async def model_info():
        return {"model_path": script.model, "is_generation": True}

    @app.post("/abort_request")
    async def abort(request: Request):
        record.aborts.append((await request.json()).get("rid", ""))
        return Response(status_code=200)

    async def generate(request: Request, chat: bool):
        body = await request.json()
        record.requests.append(body)
        record.headers.append(dict(request.headers))
        rid = body.get("rid") or f"double-{len(record.requests)}"
        if script.fail_status is not None:
            return JSONResponse(
                {"object": "error", "message": "scripted failure", "type": "Error", "code": script.fail_status},
                status_code=script.fail_status,
            )
        words = _prompt_words(body)
        if words >= script.context_len:
            message = (
                f"The input ({words} tokens) is longer than the model's context length ({script.context_len} tokens)."
            )
            return JSONResponse({"object": "error", "message": message, "type": "BadRequestError", "code": 400}, 400)
        n_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or script.default_tokens
        usage = {"prompt_tokens": words, "completion_tokens": n_tokens, "total_tokens": words + n_tokens}
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        sglext, spec_metrics = {}, {}
        if body.get("return_spec_tokens_details") and script.spec_details:
            sglext = {"sglext": {"spec_tokens_details": _spec(n_tokens)}}
            spec_metrics = {"metrics": {"speculative_decoding": _stats(body, n_tokens)}}
        if not body.get("stream"):
            async with slot():
                await asyncio.sleep(script.first_token_delay_s + script.token_delay_s * n_tokens)
            text = "".join(f" t{i}" for i in range(n_tokens))
            choice = {"index": 0, "finish_reason": "length", "logprobs": None}
            choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            record.completed.append(rid)
            return (
                {
                    "id": rid,
                    "object": kind,
                    "created": created,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": usage,
                }
                | sglext
                | spec_metrics
            )

        async def events():
            async with slot():
                async for event in generated():
                    yield event

        async def generated():
            finished = False
            try:
                await asyncio.sleep(script.first_token_delay_s)
                if script.stream_error is not None:
                    yield sse({"error": {"message": script.stream_error, "type": "BadRequestError", "code": 400}})
                    yield sse("[DONE]")
                    finished = True
                    return
                chunk_kind = "chat.completion.chunk" if chat else "text_completion"
                for i in range(n_tokens):
                    if i == script.die_after_tokens:
                        raise ConnectionAbortedError("TEST DOUBLE: scripted engine crash mid-stream")
                    if i:
                        await asyncio.sleep(script.token_delay_s)
                    last = i == n_tokens - 1
                    choice = {"index": 0, "finish_reason": "length" if last else None, "logprobs": None}
                    choice |= (
                        {"delta": {"role": "assistant", "content": f" t{i}"} if i == 0 else {"content": f" t{i}"}}
                        if chat
                        else {"text": f" t{i}"}
                    )
                    chunk = {
                        "id": rid,
                        "object": chunk_kind,
                        "created": created,
                        "model": body["model"],
                        "choices": [choice],
                        "usage": None,
                    }
                    yield sse(chunk | sglext if last else chunk)
                if (body.get("stream_options") or {}).get("include_usage"):
                    yield sse(
                        {
                            "id": rid,
                            "object": chunk_kind,
                            "created": created,
                            "model": body["model"],
                            "choices": [],
                            "usage": usage,
                        }
                        | spec_metrics
                    )
                yield sse("[DONE]")
                finished = True
                record.completed.append(rid)
            finally:
                if not finished:
                    record.disconnects.append(rid)

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await generate(request, chat=True)

    return app


def main(argv: list[str] | None = None) -> None:
    """Serve the double alone (used by bench/gateway_overhead.py): python -m tests.gateway.engine_double --port P."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="SGLang engine TEST DOUBLE")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-delay", type=float, default=0.0, help="seconds between streamed tokens")
    parser.add_argument("--model", default="tiny-moe")
    parser.add_argument("--first-token-delay", type=float, default=0.0, help="seconds before the first token")
    parser.add_argument("--max-running", type=int, default=None, help="requests generated at once (the rest wait)")
    parser.add_argument("--kv-tokens", type=int, default=None, help="KV size reported at /server_info")
    args = parser.parse_args(argv)
    script = Script(model=args.model, token_delay_s=args.token_delay, context_len=1 << 30,
                    first_token_delay_s=args.first_token_delay, max_running=args.max_running,
                    kv_tokens=args.kv_tokens)  # fmt: skip
    uvicorn.run(create_engine_double(script), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
