"""Load for bench/gateway_overhead.py: processes (pinned with taskset when asked), closed-loop streams, held streams."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
BENCH_KEY = "sk-bench-gateway-overhead"


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout_s}s")


def start(stack: ExitStack, prefix: list[str], argv: list[str], root: Path = ROOT) -> subprocess.Popen:
    """`prefix` (e.g. taskset -c 1) + this interpreter + argv run from source tree `root`, stopped when the stack
    closes."""
    proc = subprocess.Popen([*prefix, sys.executable, *argv], cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    stack.callback(lambda: (proc.terminate(), proc.wait(10)))
    return proc


async def one_stream(session: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> tuple[float, float]:
    """(TTFT, E2E) in seconds of one streamed completion."""
    start_t = time.perf_counter()
    ttft = None
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200:  # counted as a failed sample (NaN), not a crash of the bench
            await response.read()
            return float("nan"), float("nan")
        async for line in response.content:
            if ttft is None and line.startswith(b"data:") and b'"text"' in line:
                ttft = time.perf_counter() - start_t
    return (ttft if ttft is not None else float("nan")), time.perf_counter() - start_t


async def run_level(url: str, headers: dict, body: dict, concurrency: int, total: int) -> np.ndarray:
    """`total` streams from `concurrency` closed-loop workers: an array of (TTFT, E2E) rows."""
    connector = aiohttp.TCPConnector(limit=concurrency + 8, keepalive_timeout=30)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        await one_stream(session, url, body, headers)  # warm the connection path
        per_worker = max(total // concurrency, 1)

        async def worker() -> list[tuple[float, float]]:
            return [await one_stream(session, url, body, headers) for _ in range(per_worker)]

        results = await asyncio.gather(*(worker() for _ in range(concurrency)))
    return np.array([sample for worker_samples in results for sample in worker_samples])


async def hold_streams(gateway_url: str, headers: dict, body: dict, streams: int, process: psutil.Process) -> dict:
    """`streams` concurrent streams of 2 tokens a second held open through the gateway; its RSS before, at the
    peak and after (MB), sampled every 0.2 s. The engine double must be slow enough for all to be open at once."""
    idle = process.memory_info().rss
    peak, open_now, most_open = idle, 0, 0
    body = {**body, "max_tokens": 1000}  # ended by the client after `hold_s`
    hold_s = 8.0

    async def hold(session: aiohttp.ClientSession) -> None:
        nonlocal open_now
        async with session.post(gateway_url + "/v1/completions", json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
            open_now += 1
            deadline = time.monotonic() + hold_s
            async for _ in response.content:
                if time.monotonic() > deadline:
                    break
            open_now -= 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        tasks = [asyncio.create_task(hold(session)) for _ in range(streams)]
        while not all(t.done() for t in tasks):
            peak = max(peak, process.memory_info().rss)
            most_open = max(most_open, open_now)
            await asyncio.sleep(0.2)
        for task in tasks:
            task.result()
    await asyncio.sleep(1.0)
    after = process.memory_info().rss
    return {"open": most_open, "idle_mb": idle / 2**20, "peak_mb": peak / 2**20, "after_mb": after / 2**20,
            "kb_per_stream": (peak - idle) / 1024 / max(most_open, 1)}  # fmt: skip
