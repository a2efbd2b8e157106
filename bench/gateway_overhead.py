"""Added latency of the gateway: streams sent straight to the engine vs through `moe-serve gateway` (issue 5).

At each concurrency (default 1 / 50 / 200 concurrent streams) the same requests go to the engine directly and then
through the gateway; the table shows TTFT and end-to-end p50/p99 of both and the difference (gateway - direct).
The engine is the SGLang TEST DOUBLE from tests/gateway (fixed per-token delay, so both paths pay the same engine
cost) unless --engine-url names a real SGLang server. Gateway and double run as separate processes.

    python bench/gateway_overhead.py --quick
    python bench/gateway_overhead.py --engine-url http://127.0.0.1:30000 --model <served name>
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BENCH_KEY = "sk-bench-gateway-overhead"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def start(stack: ExitStack, argv: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    stack.callback(lambda: (proc.terminate(), proc.wait(10)))
    return proc


def tenants_file(stack: ExitStack) -> str:
    from service.gateway.tenants import hash_key

    directory = stack.enter_context(tempfile.TemporaryDirectory())
    path = Path(directory) / "tenants.yaml"
    path.write_text(
        f"tenants:\n  - {{name: bench, key_sha256: ['{hash_key(BENCH_KEY)}'], rpm: 100000000, tpm: 1000000000}}\n"
    )
    return str(path)


async def one_stream(client: httpx.AsyncClient, url: str, body: dict, headers: dict) -> tuple[float, float]:
    """(TTFT, E2E) in seconds of one streamed completion."""
    start_t = time.perf_counter()
    ttft = None
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if ttft is None and line.startswith("data:") and '"choices":[{' in line.replace(" ", ""):
                ttft = time.perf_counter() - start_t
    return (ttft if ttft is not None else float("nan")), time.perf_counter() - start_t


async def run_level(url: str, headers: dict, body: dict, concurrency: int, total: int) -> np.ndarray:
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        await one_stream(client, url, body, headers)  # warm the connection path
        per_worker = max(total // concurrency, 1)

        async def worker() -> list[tuple[float, float]]:
            return [await one_stream(client, url, body, headers) for _ in range(per_worker)]

        results = await asyncio.gather(*(worker() for _ in range(concurrency)))
    return np.array([sample for worker_samples in results for sample in worker_samples])


def summarize(direct: np.ndarray, gateway: np.ndarray) -> dict:
    out = {}
    for column, name in ((0, "ttft"), (1, "e2e")):
        for q in (50, 99):
            d, g = np.nanpercentile(direct[:, column], q), np.nanpercentile(gateway[:, column], q)
            out[f"{name}_p{q}_direct_ms"] = 1000 * d
            out[f"{name}_p{q}_gateway_ms"] = 1000 * g
            out[f"{name}_p{q}_added_ms"] = 1000 * (g - d)
    out["samples"] = int(len(direct))
    return out


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no PNG")
        return
    levels = [str(r["concurrency"]) for r in rows]
    x = np.arange(len(levels))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for offset, key, label in ((-0.3, "ttft_p50_added_ms", "TTFT p50"), (-0.1, "ttft_p99_added_ms", "TTFT p99"),
                               (0.1, "e2e_p50_added_ms", "E2E p50"), (0.3, "e2e_p99_added_ms", "E2E p99")):  # fmt: skip
        ax.bar(x + offset, [r[key] for r in rows], width=0.2, label=label)
    ax.set_xticks(x, levels)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("added latency (ms), gateway - direct")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-url", default=None, help="real SGLang server (default: start the test double)")
    parser.add_argument("--model", default="tiny-moe")
    parser.add_argument("--concurrency", default="1,50,200", help="comma-separated concurrent stream counts")
    parser.add_argument("--requests", type=int, default=400, help="requests per level (at least one per stream)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--token-delay", type=float, default=0.01, help="double only: seconds per token")
    parser.add_argument("--quick", action="store_true", help="8 tokens, 200 requests per level: a smoke run")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gateway_overhead.json"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # run as a script from anywhere: import this checkout's `service`
    if args.quick:
        args.max_tokens, args.requests = 8, 200
    levels = [int(c) for c in args.concurrency.split(",")]

    with ExitStack() as stack:
        engine_url = args.engine_url
        if engine_url is None:
            port = free_port()
            start(stack, ["-m", "tests.gateway.engine_double", "--port", str(port), "--token-delay", str(args.token_delay),
                          "--model", args.model])  # fmt: skip
            engine_url = f"http://127.0.0.1:{port}"
        wait_ready(f"{engine_url}/health")
        gw_port = free_port()
        start(stack, ["-m", "service.cli", "gateway", "--engine-url", engine_url, "--tenants", tenants_file(stack),
                      "--port", str(gw_port), "--model", args.model, "--log-level", "warning"])  # fmt: skip
        gateway_url = f"http://127.0.0.1:{gw_port}"
        wait_ready(f"{gateway_url}/ready")

        body = {"model": args.model, "prompt": "Benchmark the gateway overhead", "max_tokens": args.max_tokens,
                "temperature": 0.0, "ignore_eos": True, "stream": True}  # fmt: skip
        rows = []
        for concurrency in levels:
            total = max(args.requests, concurrency)
            direct = asyncio.run(run_level(f"{engine_url}/v1/completions", {}, body, concurrency, total))
            through = asyncio.run(
                run_level(
                    f"{gateway_url}/v1/completions", {"Authorization": f"Bearer {BENCH_KEY}"}, body, concurrency, total
                )
            )
            rows.append({"concurrency": concurrency, **summarize(direct, through)})

    header = f"{'streams':>7} {'n':>5} | {'TTFT p50 direct/gw/+':>24} | {'TTFT p99 direct/gw/+':>24} | {'E2E p50 +':>9} | {'E2E p99 +':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['concurrency']:>7} {r['samples']:>5} | "
            f"{r['ttft_p50_direct_ms']:7.1f} {r['ttft_p50_gateway_ms']:7.1f} {r['ttft_p50_added_ms']:+7.1f} ms | "
            f"{r['ttft_p99_direct_ms']:7.1f} {r['ttft_p99_gateway_ms']:7.1f} {r['ttft_p99_added_ms']:+7.1f} ms | "
            f"{r['e2e_p50_added_ms']:+6.1f} ms | {r['e2e_p99_added_ms']:+6.1f} ms"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"engine": args.engine_url or "test double", "max_tokens": args.max_tokens, "token_delay_s": args.token_delay,
            "quick": args.quick}  # fmt: skip
    out.write_text(json.dumps({"config": meta, "rows": rows}, indent=2))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
