"""Schedule lateness of the open-loop replayer at 50 req/s against a local server (issue 6: p99 < 5 ms).

The server is loadtest/scripted_server.py (a TEST DOUBLE streaming fixed-latency tokens) in its own process, so only
the replayer's clock is measured. Lateness = actual send time - scheduled time, per request.

    python bench/replay_lateness.py --seconds 20 --rate 50 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script from anywhere

from service.traces.replay import ReplayConfig, replay  # noqa: E402
from service.traces.types import Schedule, TraceRequest  # noqa: E402


def arrivals(kind: str, rate: float, seconds: float, seed: int) -> list[float]:
    if kind == "uniform":
        return [i / rate for i in range(int(rate * seconds))]
    rng = random.Random(seed)  # Poisson process: exponential gaps
    times, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < seconds:
        times.append(t)
    return times


def measure(url: str, kind: str, args: argparse.Namespace) -> dict:
    times = arrivals(kind, args.rate, args.seconds, args.seed)
    s = Schedule(tuple(TraceRequest(t, 8, args.output_tokens, (i,)) for i, t in enumerate(times)), kind)
    result = asyncio.run(replay(s, ["hello world"] * len(s), ReplayConfig(url=url, model="bench")))
    late_ms = np.array([r.lateness_s for r in result.records]) * 1000
    return {
        "arrivals": kind,
        "requests": len(s),
        "rate_req_s": args.rate,
        "failed": sum(not r.success for r in result.records),
        "lateness_p50_ms": float(np.percentile(late_ms, 50)),
        "lateness_p99_ms": float(np.percentile(late_ms, 99)),
        "lateness_max_ms": float(late_ms.max()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-m", "loadtest.scripted_server", "--port", "0", "--ttft-ms", "10", "--itl-ms", "2"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip()
        rows = [measure(url, kind, args) for kind in ("uniform", "poisson")]
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"{'arrivals':<10}{'requests':>9}{'failed':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for r in rows:
        print(
            f"{r['arrivals']:<10}{r['requests']:>9}{r['failed']:>8}"
            f"{r['lateness_p50_ms']:>9.2f}{r['lateness_p99_ms']:>9.2f}{r['lateness_max_ms']:>9.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"config": vars(args), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
