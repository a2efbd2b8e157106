"""Open-loop streaming client that records, per request, how it ended: complete, a clear error, lost or duplicated.

- complete: HTTP 200, one `data: [DONE]`, a finish_reason on every choice, no error event, and the tokens a client
  would count (usage.completion_tokens) equal to what it asked for (max_tokens with ignore_eos), streamed once.
- error: a status >= 400 whose body is an OpenAI error (`error.code` and `error.message`), or a 200 stream that ends
  with an error event and then `[DONE]`: the client knows it failed and why.
- lost: no terminal answer (timeout, connection dropped before `[DONE]`, a stream that just stops, an error without
  the OpenAI shape).
- duplicated: two terminal answers (two `[DONE]`, a finish and an error, two usage chunks) or tokens repeated (more
  streamed text chunks than tokens generated; with the engine test double, whose token i is " t{i}", any repeat).

Sends happen at `start + arrival_s` on one monotonic clock (service/traces/replay.py's rule), so a slow response never
delays later arrivals.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass

import aiohttp

OUTCOMES = ("complete", "error", "lost", "duplicated")


@dataclass(frozen=True)
class Outcome:
    index: int  # request number in the schedule
    due_s: float  # seconds after start it was scheduled
    sent_s: float  # seconds after start it was sent
    end_s: float  # seconds after start its answer ended (or the client gave up)
    first_token_s: float | None  # seconds after start of the first streamed text, if any
    outcome: str  # one of OUTCOMES
    status: int | None  # HTTP status, None when no response came
    code: str | None  # OpenAI error code (HTTP error or SSE error event), else None
    detail: str  # why, for anything but complete
    tokens: int  # streamed text chunks

    def row(self) -> dict:
        return asdict(self)


@dataclass
class _Stream:
    done: int = 0
    finishes: int = 0
    usages: int = 0
    completion_tokens: int | None = None
    chunks: int = 0
    texts: list[str] = None  # type: ignore[assignment]  # streamed text pieces, in order
    error: dict | None = None
    first_token_at: float | None = None

    def __post_init__(self) -> None:
        self.texts = []

    def feed(self, line: bytes, now: float) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done += 1
            return
        event = json.loads(payload)
        if "error" in event:
            self.error = event["error"] if isinstance(event["error"], dict) else {"message": str(event["error"])}
            return
        if isinstance(event.get("usage"), dict):
            self.usages += 1
            self.completion_tokens = event["usage"].get("completion_tokens")
        for choice in event.get("choices") or []:
            if choice.get("text"):
                self.chunks += 1
                self.texts.append(choice["text"])
                if self.first_token_at is None:
                    self.first_token_at = now
            if choice.get("finish_reason") is not None:
                self.finishes += 1


def judge_stream(s: _Stream, max_tokens: int, n_choices: int, double_tokens: bool) -> tuple[str, str | None, str]:
    """(outcome, error code, detail) of a 200 stream read to its end."""
    if s.done > 1 or s.usages > 1 or (s.error is not None and s.finishes) or s.finishes > n_choices:
        return "duplicated", None, f"done={s.done} usages={s.usages} finishes={s.finishes} error={s.error is not None}"
    if s.done == 0:
        return "lost", None, f"stream ended without [DONE] after {s.chunks} chunks"
    if s.error is not None:
        code = s.error.get("code")
        if isinstance(code, str) and code and s.error.get("message"):
            return "error", code, str(s.error.get("message"))[:200]
        return "lost", None, f"error event without an OpenAI error code: {s.error}"
    if s.finishes < n_choices:
        return "lost", None, f"[DONE] without a finish_reason ({s.finishes}/{n_choices})"
    if s.completion_tokens is not None and s.chunks > s.completion_tokens:
        return "duplicated", None, f"{s.chunks} text chunks for {s.completion_tokens} tokens"
    if double_tokens and s.texts != [f" t{i}" for i in range(len(s.texts))]:
        return "duplicated", None, f"tokens out of sequence: {''.join(s.texts)[:120]!r}"
    if s.completion_tokens != max_tokens * n_choices:
        return "lost", None, f"usage says {s.completion_tokens} tokens, asked {max_tokens}"
    return "complete", None, ""


def judge_error(status: int, body: bytes) -> tuple[str, str | None, str]:
    try:
        error = json.loads(body)["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        return "lost", None, f"HTTP {status} without an OpenAI error body: {body[:200]!r}"
    if isinstance(code, str) and code and isinstance(message, str) and message:
        return "error", code, message[:200]
    return "lost", None, f"HTTP {status} error without code: {body[:200]!r}"


async def send_one(
    session: aiohttp.ClientSession, url: str, body: dict, index: int, due: float, t0: float, timeout_s: float,
    double_tokens: bool,
) -> Outcome:  # fmt: skip
    sent = time.perf_counter()
    stream = _Stream()
    status = None
    try:
        async with asyncio.timeout(timeout_s), session.post(url, json=body) as response:
            status = response.status
            if status != 200:
                outcome, code, detail = judge_error(status, await response.read())
            else:
                async for line in response.content:
                    stream.feed(line, time.perf_counter())
                outcome, code, detail = judge_stream(stream, body["max_tokens"], body.get("n", 1), double_tokens)
    except TimeoutError:
        outcome, code, detail = "lost", None, f"no terminal answer within {timeout_s:g} s"
    except (aiohttp.ClientError, ValueError) as exc:
        # A connection dropped after [DONE] still delivered the answer; before it, nothing terminal came.
        if stream.done:
            outcome, code, detail = judge_stream(stream, body["max_tokens"], body.get("n", 1), double_tokens)
        else:
            outcome, code, detail = "lost", None, f"{type(exc).__name__}: {exc}"[:200]
    end = time.perf_counter()
    first = None if stream.first_token_at is None else stream.first_token_at - t0
    return Outcome(index, due, sent - t0, end - t0, first, outcome, status, code, detail, stream.chunks)


async def replay_outcomes(
    url: str, headers: dict, bodies: list[dict], arrivals: list[float], timeout_s: float, double_tokens: bool,
    t0: float,
) -> list[Outcome]:  # fmt: skip
    """Send body i at t0 + arrivals[i] (perf_counter seconds) to `url`; every request's Outcome, in order."""
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)  # closes idle connections before the gateway
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        tasks = []
        for i, (body, due) in enumerate(zip(bodies, arrivals, strict=True)):
            delay = t0 + due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send_one(session, url, body, i, due, t0, timeout_s, double_tokens)))
        return list(await asyncio.gather(*tasks))
