"""Closed-loop load for engine benches: streamed `/v1/completions` requests, timed on the client like
`vllm bench serve` (TTFT = send -> first text, TPOT = (E2E - TTFT) / (output tokens - 1), ITL = the median gap
between streamed text chunks). Works against SGLang and vLLM alike; engine-specific fields (SGLang's `custom_params`
hints) go in `extra`.

TPOT depends on when an engine streams a request's first and last token, ITL does not. SGLang's overlap scheduler
streams a step's tokens after it has launched the next batch, which on the CPU engine means after that batch has run:
a request's first token leaves one step late (TTFT takes a step that TPOT then lacks, ~1 / (n - 1) of TPOT for n
output tokens), and a first token that a wave's later prefill follows waits for that prefill in TTFT instead of in
TPOT. A synchronous engine (moe-serve's speculative ones) streams each token when its step ends. Where no request
speculates every chunk is one token and ITL is the decode step as the client sees it, whichever scheduler ran it; with
speculation a chunk may carry several tokens and ITL is a step, not a token."""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import json
import statistics
import time
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Completion:
    ttft_s: float  # seconds from send to the first streamed text
    e2e_s: float  # seconds from send to the end of the stream
    output_tokens: int  # tokens generated (server usage)
    chunk_s: tuple[float, ...] = ()  # seconds from send to each streamed chunk with text

    @property
    def itl_s(self) -> float | None:  # median gap between text chunks
        gaps = [b - a for a, b in itertools.pairwise(self.chunk_s)]
        return statistics.median(gaps) if gaps else None

    @property
    def tpot_s(self) -> float | None:  # seconds per output token after the first
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) if self.output_tokens > 1 else None


@functools.cache
def client() -> httpx.Client:
    """The process's one HTTP client for timed requests, shared by the load's threads (an httpx.Client is
    thread-safe). Building a client costs ~34 ms of CPU (its TLS context loads the CA bundle; 2-core AMD EPYC, 54th
    session): one per request, as before, counted that in every TTFT and, taken in turn under the GIL, let a wave of
    8 requests reach the engine one at a time, 100-340 ms after its first submit, so that an engine prefilled it in
    parts (bench/results/sync-b8-s54). No keep-alive: an engine restarted on the same port, or one that closed an
    idle connection, never meets a stale one, and a connection on localhost costs well under a millisecond."""
    return httpx.Client(timeout=600, limits=httpx.Limits(max_keepalive_connections=0))


def served_model(url: str) -> str:
    return httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]


def complete(url: str, model: str, prompt: str | list[int], max_tokens: int, extra: dict | None = None) -> Completion:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,  # every request generates exactly max_tokens, so policies compare like for like
        "skip_special_tokens": False,  # end-of-text tokens stream as text, so every token is timed
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    sent, chunks, tokens, error = time.perf_counter(), [], None, None
    with client().stream("POST", f"{url}/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {resp.read()[:300]!r}")
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            error = chunk.get("error") or error
            if any(c.get("text") for c in chunk.get("choices") or ()):
                chunks.append(time.perf_counter() - sent)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    if not chunks or tokens is None:
        raise RuntimeError(f"stream ended without text or usage: {error or 'no error chunk'}")
    return Completion(ttft_s=chunks[0], e2e_s=end - sent, output_tokens=tokens, chunk_s=tuple(chunks))


REQUEST_FIELDS = ("ttft_ms", "tpot_ms", "first_gap_ms", "max_gap_ms", "chunks")  # a `per_request` row


def _request_row(c: Completion) -> list:
    """One request's REQUEST_FIELDS (ms to 0.1; a gap is None where the stream had one chunk)."""
    gaps = [b - a for a, b in itertools.pairwise(c.chunk_s)]
    ms = [c.ttft_s, c.tpot_s, gaps[0] if gaps else None, max(gaps) if gaps else None]
    return [None if v is None else round(v * 1e3, 1) for v in ms] + [len(c.chunk_s)]


def cpu_ticks() -> tuple[int, int] | None:
    """(all, steal) CPU ticks of this machine so far (/proc/stat), None where there is no such file."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields), fields[7] if len(fields) > 7 else 0


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time the hypervisor gave other guests between two cpu_ticks()."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def run_batch(url: str, model: str, prompts: list, max_tokens: int, concurrency: int, extra=None) -> dict:
    """All prompts, `concurrency` in flight at a time; TPOT over requests and output tokens per wall second, and
    each request's own timing (`per_request`, REQUEST_FIELDS: what a mean over a wave hides, such as one request
    whose first and second token a later prefill separates), and the hypervisor's steal share meanwhile: on the
    2-core hosts here a wave's batch-8 TPOT rose with it (correlation 0.86 over 16 waves of a plain engine, steal
    0-6 %: neighbours' load, of which steal is the visible part; bench/results/noise-s55)."""
    start, ticks = time.perf_counter(), cpu_ticks()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(lambda p: complete(url, model, p, max_tokens, extra), prompts))
    wall = time.perf_counter() - start
    stolen = steal_share(ticks, cpu_ticks())
    tpots = sorted(c.tpot_s for c in done if c.tpot_s is not None)
    itls = [c.itl_s for c in done if c.itl_s is not None]
    return {
        "requests": len(done),
        "per_request": [_request_row(c) for c in done],
        "tpot_ms": statistics.mean(tpots) * 1e3,
        "tpot_p90_ms": tpots[min(int(0.9 * len(tpots)), len(tpots) - 1)] * 1e3,
        "ttft_ms": statistics.mean(c.ttft_s for c in done) * 1e3,
        "itl_ms": statistics.mean(itls) * 1e3 if itls else None,
        # robust to a server that streams in bursts (TPOT from stream timestamps then reads near zero)
        "e2e_per_token_ms": statistics.mean(c.e2e_s / c.output_tokens for c in done) * 1e3,
        "tokens_per_s": sum(c.output_tokens for c in done) / wall,
        "tokens": sum(c.output_tokens for c in done),
        "wall_s": wall,
        "steal_share": stolen,  # other guests' share of this machine's CPU meanwhile (tracks TPOT: noise-s55)
    }
