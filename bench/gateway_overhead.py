"""The gateway's own cost: added latency (streams straight to the engine vs through `moe-serve gateway`), the gateway
process's CPU time per request and per relayed token, and its memory under 1,000 concurrent streaming clients.

Latency: at each concurrency (default 1 / 50 / 200 streams) the same requests go to the engine directly and through
the gateway, interleaved and repeated (`--repeats`); TTFT and E2E p50/p99 of both, the difference, and its spread over
the repeats. Wall-clock numbers on a shared machine are noisy; the CPU figures are not: the gateway's CPU time (user +
system, from its own clock via psutil) is measured over runs of 1-token and of N-token streams at the same
concurrency and solved for a per-request and a per-token cost (cpu = a * requests + b * tokens). With 2+ cores the
client runs on core 0, the gateway alone on core 1, the engine double on core 0 (taskset).
RSS: `--streams` (default 1,000) concurrent slow streams held open through the gateway, its RSS sampled.

The engine is the SGLang TEST DOUBLE from tests/gateway (fixed per-token delay, so both paths pay the same engine
cost) unless --engine-url names a real SGLang server. Gateway and double run as separate processes.

    python -m bench.gateway_overhead --quick
    python -m bench.gateway_overhead --engine-url http://127.0.0.1:30000 --model <served name>
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import psutil

from bench._common import figure, out_dir, save_figure, table, write_json
from bench._fault_cluster import free_port
from bench._gateway_load import BENCH_KEY, hold_streams, run_level, start, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def pinning() -> dict[str, list[str]]:
    """taskset prefixes: client on core 0, gateway alone on core 1, engine double with the client (2+ cores)."""
    if (os.cpu_count() or 1) < 2 or not Path("/usr/bin/taskset").exists():
        return {"client": [], "gateway": [], "engine": []}
    os.sched_setaffinity(0, {0})  # the client: this process
    return {"client": ["taskset", "-c", "0"], "gateway": ["taskset", "-c", "1"], "engine": ["taskset", "-c", "0"]}


def tenants_file(stack: ExitStack) -> str:
    from service.gateway.tenants import hash_key

    directory = stack.enter_context(tempfile.TemporaryDirectory())
    path = Path(directory) / "tenants.yaml"
    path.write_text(
        f"tenants:\n  - {{name: bench, key_sha256: ['{hash_key(BENCH_KEY)}'], rpm: 100000000, tpm: 1000000000}}\n"
    )
    return str(path)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def summarize(direct: list[np.ndarray], gateway: list[np.ndarray]) -> dict:
    """p50/p99 of TTFT and E2E per path over all repeats, and the added ms per repeat (its spread)."""
    out = {}
    for column, name in ((0, "ttft"), (1, "e2e")):
        for q in (50, 99):
            d = [np.nanpercentile(x[:, column], q) for x in direct]
            g = [np.nanpercentile(x[:, column], q) for x in gateway]
            added = [1000 * (b - a) for a, b in zip(d, g, strict=True)]
            out[f"{name}_p{q}_direct_ms"] = 1000 * float(np.median(d))
            out[f"{name}_p{q}_gateway_ms"] = 1000 * float(np.median(g))
            out[f"{name}_p{q}_added_ms"] = float(np.median(added))
            out[f"{name}_p{q}_added_spread_ms"] = [float(min(added)), float(max(added))]
            out[f"{name}_p{q}_ratio"] = float(np.median(g)) / max(float(np.median(d)), 1e-9)
    out["samples"] = int(sum(len(x) for x in direct))
    out["failed_direct"] = int(sum(np.isnan(x[:, 1]).sum() for x in direct))
    out["failed_gateway"] = int(sum(np.isnan(x[:, 1]).sum() for x in gateway))
    return out


def cpu_costs(targets: dict[str, tuple[str, psutil.Process]], headers: dict, body: dict, concurrency: int,
              requests: int, tokens: int) -> dict:  # fmt: skip
    """Gateway CPU per request and per relayed token, per target gateway: runs of 1-token and `tokens`-token streams
    (interleaved across targets, so machine load falls on all alike), solved for cpu = a * requests + b * tokens."""
    points: dict[str, list] = {name: [] for name in targets}
    for n_tokens in (1, tokens, 1, tokens):
        for name, (url, process) in targets.items():
            before = cpu_seconds(process)
            samples = asyncio.run(run_level(url, headers, {**body, "max_tokens": n_tokens}, concurrency, requests))
            points[name].append((len(samples), len(samples) * n_tokens, cpu_seconds(process) - before))
    out = {}
    for name, runs in points.items():
        a = np.array([[r, t] for r, t, _ in runs], dtype=float)
        per_request, per_token = np.linalg.lstsq(a, np.array([c for *_, c in runs]), rcond=None)[0]
        out[name] = {
            "cpu_ms_per_request": 1000 * float(per_request),
            "cpu_us_per_token": 1e6 * float(per_token),
            "cpu_runs": [{"requests": r, "tokens": t, "cpu_s": c} for r, t, c in runs],
        }
    return out


def gateway_process(proc) -> psutil.Process:
    return psutil.Process(proc.pid)  # taskset execs the interpreter: the same pid


def baseline_gateway(stack: ExitStack, pins: dict, args, engine_url: str) -> tuple[str, psutil.Process]:
    """The gateway of another source tree (e.g. `git worktree add /tmp/base <commit>`) on the same engine, for a CPU
    comparison within one run. httptools is hidden from it: a tree whose dependencies lack it ran on h11."""
    port = free_port()
    code = "import sys; sys.modules['httptools'] = None; from service.cli import main; sys.exit(main())"
    proc = start(stack, pins["gateway"], ["-c", code, "gateway", "--engine-url", engine_url, "--tenants",
                 tenants_file(stack), "--port", str(port), "--model", args.model, "--log-level", "warning"],
                 root=Path(args.baseline_src))  # fmt: skip
    wait_ready(f"http://127.0.0.1:{port}/ready")
    return f"http://127.0.0.1:{port}/v1/completions", gateway_process(proc)


def rss_phase(args, pins: dict) -> dict:
    """Its own slow double (2 tokens/s per stream) and gateway: `--streams` streams held open at once."""
    with ExitStack() as stack:
        port, gw_port = free_port(), free_port()
        start(stack, pins["engine"], ["-m", "tests.gateway.engine_double", "--port", str(port), "--token-delay", "0.5",
                                      "--model", args.model])  # fmt: skip
        wait_ready(f"http://127.0.0.1:{port}/health")
        gateway = start(stack, pins["gateway"], ["-m", "service.cli", "gateway", "--engine-url",
                        f"http://127.0.0.1:{port}", "--tenants", tenants_file(stack), "--port", str(gw_port),
                        "--model", args.model, "--log-level", "warning",
                        "--replica-requests", str(2 * args.streams)])  # fmt: skip
        wait_ready(f"http://127.0.0.1:{gw_port}/ready")
        body = {"model": args.model, "prompt": "hold", "ignore_eos": True, "stream": True}
        auth = {"Authorization": f"Bearer {BENCH_KEY}"}
        process = gateway_process(gateway)
        return asyncio.run(hold_streams(f"http://127.0.0.1:{gw_port}", auth, body, args.streams, process))


def plot(rows: list[dict], path: Path) -> None:
    fig, (ax,) = figure(1, (6, 3.5))
    x = np.arange(len(rows))
    for offset, key, label in ((-0.3, "ttft_p50_added_ms", "TTFT p50"), (-0.1, "ttft_p99_added_ms", "TTFT p99"),
                               (0.1, "e2e_p50_added_ms", "E2E p50"), (0.3, "e2e_p99_added_ms", "E2E p99")):  # fmt: skip
        ax.bar(x + offset, [r[key] for r in rows], width=0.2, label=label)
    ax.set_xticks(x, [str(r["concurrency"]) for r in rows])
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("added latency (ms), gateway - direct")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-url", default=None, help="real SGLang server (default: start the test double)")
    parser.add_argument("--model", default="tiny-moe")
    parser.add_argument("--concurrency", default="1,50,200", help="comma-separated concurrent stream counts")
    parser.add_argument("--requests", type=int, default=400, help="requests per level and repeat")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved direct/gateway repeats per level")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--token-delay", type=float, default=0.01, help="double only: seconds per token")
    parser.add_argument("--streams", type=int, default=1000, help="concurrent streams of the RSS phase (0: skip)")
    parser.add_argument("--quick", action="store_true", help="8 tokens, 200 requests, 2 repeats: a smoke run")
    parser.add_argument("--baseline-src", default=None, help="source tree of another gateway version: its CPU per "
                        "request/token measured interleaved with this one's")  # fmt: skip
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.max_tokens, args.requests, args.repeats = 8, 200, 2
    levels = [int(c) for c in args.concurrency.split(",")]
    pins = pinning()

    with ExitStack() as stack:
        engine_url = args.engine_url
        if engine_url is None:
            port = free_port()
            start(stack, pins["engine"], ["-m", "tests.gateway.engine_double", "--port", str(port), "--token-delay",
                                          str(args.token_delay), "--model", args.model])  # fmt: skip
            engine_url = f"http://127.0.0.1:{port}"
        wait_ready(f"{engine_url}/health")
        gw_port = free_port()
        gateway = start(stack, pins["gateway"], ["-m", "service.cli", "gateway", "--engine-url", engine_url,
                        "--tenants", tenants_file(stack), "--port", str(gw_port), "--model", args.model,
                        "--log-level", "warning", "--replica-requests", str(2 * max(args.streams, 256))])  # fmt: skip
        gateway_url = f"http://127.0.0.1:{gw_port}"
        wait_ready(f"{gateway_url}/ready")
        process = gateway_process(gateway)
        auth = {"Authorization": f"Bearer {BENCH_KEY}"}
        body = {"model": args.model, "prompt": "Benchmark the gateway overhead", "max_tokens": args.max_tokens,
                "temperature": 0.0, "ignore_eos": True, "stream": True}  # fmt: skip
        rows = []
        for concurrency in levels:
            total = max(args.requests, concurrency)
            direct, through = [], []
            for _ in range(args.repeats):
                direct.append(asyncio.run(run_level(f"{engine_url}/v1/completions", {}, body, concurrency, total)))
                through.append(asyncio.run(run_level(f"{gateway_url}/v1/completions", auth, body, concurrency, total)))
            rows.append({"concurrency": concurrency, **summarize(direct, through)})
        targets = {"gateway": (f"{gateway_url}/v1/completions", process)}
        if args.baseline_src:
            targets["baseline"] = baseline_gateway(stack, pins, args, engine_url)
        costs = cpu_costs(targets, auth, body, 50, args.requests, 64)
        cost = {**costs["gateway"], **({"baseline": costs["baseline"]} if args.baseline_src else {})}
    rss = rss_phase(args, pins) if args.streams and args.engine_url is None else None

    columns = ["concurrency", "samples", "failed_gateway", "ttft_p50_direct_ms", "ttft_p50_gateway_ms", "ttft_p50_added_ms",
               "ttft_p99_added_ms", "ttft_p99_added_spread_ms", "ttft_p99_ratio", "e2e_p50_added_ms"]  # fmt: skip
    print(table(rows, columns))
    print(f"gateway CPU: {cost['cpu_ms_per_request']:.3f} ms per request, {cost['cpu_us_per_token']:.1f} us per token")
    if "baseline" in cost:
        base = cost["baseline"]
        print(f"baseline CPU: {base['cpu_ms_per_request']:.3f} ms per request, {base['cpu_us_per_token']:.1f} us "
              f"per token (same run, interleaved)")  # fmt: skip
    if rss:
        print(f"gateway RSS: {rss['idle_mb']:.0f} MB idle, {rss['peak_mb']:.0f} MB with {rss['open']} open streams "
              f"({rss['kb_per_stream']:.0f} KB each), {rss['after_mb']:.0f} MB after")  # fmt: skip
    folder = out_dir(args.out, "gateway_overhead")
    meta = {"engine": args.engine_url or "test double", "max_tokens": args.max_tokens, "quick": args.quick,
            "token_delay_s": args.token_delay, "repeats": args.repeats, "pinned": bool(pins["gateway"]),
            "load_average": os.getloadavg()}  # fmt: skip
    write_json(folder, "gateway_overhead", {"config": meta, "rows": rows, "cpu": cost, "rss": rss})
    plot(rows, folder / "gateway_overhead.png")
    print(f"wrote {folder}/gateway_overhead.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
