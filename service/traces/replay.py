"""Open-loop replay of a schedule against an OpenAI-compatible `/v1/completions` endpoint (issue 6, item 3).

Open loop: a request is sent at its scheduled time whether or not earlier ones have finished. Every send time is
`start + arrival_s` on one monotonic clock, so a late wake-up delays one request, not all later ones (sleeping the gap
between arrivals would accumulate every wake-up's error). Lateness (sent - due) is recorded per request to prove it.

Per request, timed on the client as `vllm bench serve` does: TTFT (send -> first streamed text), ITL (gaps between
streamed text chunks), E2E (send -> end of stream); output tokens from the final `usage` chunk, else the chunk count.
SGLang's speculation stats come from its `sglext.spec_tokens_details` chunk, asked for with
`return_spec_tokens_details` (sglang/srt/entrypoints/openai/serving_completions.py); through the moe-serve gateway,
which keeps SGLang's extension to itself, from the `metrics.speculative_decoding` it returns for
`speculation: {"stats": true}` (the same counts: one verify step per decode step).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from service.traces.types import Schedule


@dataclass(frozen=True)
class ReplayConfig:
    url: str  # server base URL (http://host:port) or the full /v1/completions URL
    model: str  # model name sent in each request
    timeout_s: float = 600.0  # seconds one request may take before it is recorded as an error
    temperature: float = 0.0  # sampling temperature sent with every request
    spec_stats: bool = True  # ask an SGLang server for per-request speculation stats
    lead_s: float = 0.05  # seconds between starting the clock and the schedule's time 0
    headers: dict[str, str] = field(default_factory=dict)  # extra HTTP headers (e.g. Authorization)
    extra_body: dict = field(default_factory=dict)  # extra request fields (e.g. SGLang's custom_params hints)

    @property
    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/v1/completions") else f"{base}/v1/completions"


@dataclass(frozen=True)
class RequestRecord:
    index: int  # position in the schedule
    due_s: float  # seconds after replay start the request was scheduled
    sent_s: float  # seconds after replay start it was actually sent
    input_tokens: int  # prompt tokens the schedule asked for
    max_tokens: int  # output tokens asked for (max_tokens with ignore_eos)
    ttft_s: float | None  # seconds from send to the first streamed text; None if none arrived
    itl_s: tuple[float, ...]  # seconds between consecutive streamed text chunks
    e2e_s: float | None  # seconds from send to the end of the stream; None on error
    output_tokens: int  # tokens generated (server usage, else streamed chunks)
    prompt_tokens: int | None  # prompt tokens as the server counted them, if it said
    error: str | None  # None on success, else what went wrong
    spec: dict | None = None  # SGLang spec_tokens_details (spec_verify_ct, spec_accept_length, ...) if returned

    @property
    def lateness_s(self) -> float:  # seconds the send trailed its due time
        return self.sent_s - self.due_s

    @property
    def success(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ReplayResult:
    records: tuple[RequestRecord, ...]  # one per scheduled request, in schedule order
    duration_s: float  # seconds from the schedule's time 0 to the last request's end
    started_unix_s: float  # wall-clock time of the schedule's time 0


async def replay(
    schedule: Schedule,
    prompts: Sequence[str | list[int]],
    config: ReplayConfig,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> ReplayResult:
    """Send every request of `schedule` (prompt i for request i) at its arrival time; wait for all to finish."""
    if len(prompts) != len(schedule):
        raise ValueError(f"{len(prompts)} prompts for {len(schedule)} requests")
    bad = [i for i, r in enumerate(schedule.requests) if r.output_tokens < 1]
    if bad:
        raise ValueError(f"{len(bad)} requests ask for 0 output tokens (e.g. #{bad[0]}); apply failed_requests first")
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=config.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=config.headers) as session:
        t0 = time.perf_counter() + config.lead_s
        started_unix = time.time() + config.lead_s
        tasks = []
        for i, (request, prompt) in enumerate(zip(schedule.requests, prompts, strict=True)):
            delay = t0 + request.arrival_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = _body(config, prompt, request.output_tokens)
            task = asyncio.create_task(_send(session, config, body, i, request.arrival_s, request.input_tokens, t0))
            if on_done is not None:
                task.add_done_callback(lambda t: on_done(t.result()) if not t.cancelled() else None)
            tasks.append(task)
        records = await asyncio.gather(*tasks)
    ends = [r.sent_s + (r.e2e_s or 0.0) for r in records]
    return ReplayResult(records=tuple(records), duration_s=max(ends, default=0.0), started_unix_s=started_unix)


def _body(config: ReplayConfig, prompt: str | list[int], max_tokens: int) -> dict:
    body = {
        "model": config.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,  # force exactly the trace's output length
        "temperature": config.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    extra = dict(config.extra_body)
    if config.spec_stats:
        body["return_spec_tokens_details"] = True  # SGLang itself
        body["speculation"] = {"stats": True, **extra.pop("speculation", {})}  # the moe-serve gateway
    return {**body, **extra}


async def _send(
    session: aiohttp.ClientSession, config: ReplayConfig, body: dict, index: int, due_s: float, n_in: int, t0: float
) -> RequestRecord:
    sent = time.perf_counter()
    stream = _StreamState()
    error = None
    try:
        async with session.post(config.endpoint, json=body) as resp:
            if resp.status != 200:
                text = await resp.text()
                error = f"HTTP {resp.status}: {text[:300]}"
            else:
                async for raw in resp.content:
                    stream.feed(raw, time.perf_counter())
                if not stream.chunk_times:
                    error = "stream ended without any text"
                elif stream.error:
                    error = stream.error
    except TimeoutError:
        error = f"timeout after {config.timeout_s:g} s"
    except aiohttp.ClientError as e:
        error = f"{type(e).__name__}: {e}"
    end = time.perf_counter()
    times = stream.chunk_times
    return RequestRecord(
        index=index,
        due_s=due_s,
        sent_s=sent - t0,
        input_tokens=n_in,
        max_tokens=body["max_tokens"],
        ttft_s=times[0] - sent if times else None,
        itl_s=tuple(b - a for a, b in zip(times, times[1:], strict=False)),
        e2e_s=None if error else end - sent,
        output_tokens=stream.completion_tokens if stream.completion_tokens is not None else len(times),
        prompt_tokens=stream.prompt_tokens,
        error=error,
        spec=stream.spec_record(),
    )


class _StreamState:
    """Parses SSE `data:` lines of a streamed completion as they arrive."""

    def __init__(self) -> None:
        self.chunk_times: list[float] = []  # perf_counter seconds of each chunk carrying text
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.spec: dict | None = None
        self.summary: dict | None = None  # moe-serve's metrics.speculative_decoding, when returned
        self.error: str | None = None

    def spec_record(self) -> dict | None:
        """The request's speculation fields: from moe-serve's summary where it came, else SGLang's. SGLang's verify
        count is of scheduler steps, and a plain burst of moe-serve's speculative engines (moe_sglang/plain_burst.py)
        decodes several tokens of no draft in one, which SGLang's accept length would count as accepted."""
        return self.spec_from_summary() or self.spec

    def spec_from_summary(self) -> dict | None:
        """SGLang's per-request fields from moe-serve's summary: verify steps are decode steps, accept length is
        completion tokens per verify step (SGLang's definition)."""
        steps = (self.summary or {}).get("num_decode_steps")
        if not steps or self.completion_tokens is None:
            return None
        return {"spec_verify_ct": steps, "spec_accept_length": self.completion_tokens / steps}

    def feed(self, raw: bytes, now: float) -> None:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            return
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            self.error = f"bad stream chunk {payload[:100]!r}"
            return
        if "error" in chunk:
            self.error = f"server error: {str(chunk['error'])[:300]}"
            return
        if any(c.get("text") for c in chunk.get("choices") or []):
            self.chunk_times.append(now)
        usage = chunk.get("usage")
        if usage:
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
        spec = (chunk.get("sglext") or {}).get("spec_tokens_details")
        if spec:
            self.spec = spec[0] if isinstance(spec, list) else spec
        summary = (chunk.get("metrics") or {}).get("speculative_decoding")
        if summary:
            self.summary = summary
