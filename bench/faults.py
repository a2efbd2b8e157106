"""Fault-injected trace replay through the gateway: nothing lost, nothing duplicated, overload refused early.

A Mooncake (or Azure 2023) conversation window, time-scaled to `--load` (default 2x) the request rate the two engine
replicas sustain (measured first, closed loop through the gateway), is replayed open-loop through one gateway in front
of two engine replicas for `--duration-s`. During it one engine is SIGKILLed (its whole process group) and started
again on the same port (`moe-serve engine`), and the gateway's Redis is stopped and started. Every request ends as
complete / error (HTTP status + OpenAI code, or an SSE error event) / lost / duplicated (bench/_outcomes.py);
the goal is 0 lost and 0 duplicated. Reported: the outcome table, errors by code, recovery time after each fault
(the gateway routing to the restarted replica again; the gateway charging Redis again and its queued settlements
replayed), a timeline plot, and the gateway's RSS.

    python -m bench.faults                 # real CPU SGLang engines, bundled model, 4 minutes
    python -m bench.faults --ci            # engine test doubles as processes, ~20 s (tests/bench/test_faults.py)
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import tempfile
import time
from pathlib import Path

from bench import _fault_cluster as cluster
from bench._common import out_dir, table, write_json
from bench._fault_report import plot_timeline, recovery, summarize
from bench._fault_sampler import Sampler
from bench._outcomes import replay_outcomes
from service.gateway.tenants import hash_key
from service.traces import schedule as sched
from service.traces.formats import load_trace
from tests.gateway.redis_server import RedisServer

KEY = "sk-bench-faults"
TRACES = {"mooncake": "mooncake_conversation_trace.jsonl", "azure": "azure_llm_2023_conv.csv"}
FULL = {"duration_s": 240.0, "probe_s": 30.0, "max_running": 8, "max_tokens": 16, "timeout_s": 180.0}
CI = {"duration_s": 16.0, "probe_s": 3.0, "max_running": 4, "max_tokens": 12, "timeout_s": 30.0}


def default_traces() -> Path:
    return Path(os.environ.get("MOE_SERVE_TRACES_DIR") or Path(__file__).resolve().parents[2] / "shared" / "traces")


def bodies_for(requests, model: str, max_input: int) -> list[dict]:
    """Token-id prompts of the trace's input lengths (ids kept low: valid for any vocabulary of the bundled models)."""
    out = []
    for i, r in enumerate(requests):
        n = max(1, min(r.input_tokens, max_input))
        prompt = [100 + (i * 7919 + j * 31) % 1000 for j in range(n)]
        out.append({"model": model, "prompt": prompt, "max_tokens": r.output_tokens, "ignore_eos": True,
                    "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}})  # fmt: skip
    return out


async def measure_capacity(url: str, bodies: list[dict], concurrency: int, seconds: float) -> float:
    """Completed requests per second, closed loop at `concurrency` streams through the gateway."""
    stop = time.perf_counter() + seconds
    done = 0

    async def worker(k: int) -> None:
        nonlocal done
        i = k
        while time.perf_counter() < stop:
            [outcome] = await replay_outcomes(url, {"Authorization": f"Bearer {KEY}"}, [bodies[i % len(bodies)]],
                                              [0.0], 120.0, False, time.perf_counter())  # fmt: skip
            done += outcome.outcome == "complete"
            i += concurrency

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    return done / (time.perf_counter() - started)


def fitted(args) -> sched.Schedule:
    s = load_trace(args.traces / TRACES[args.trace])
    s, _ = sched.cap_output(s, args.max_tokens)
    return s


async def faults_plan(engines, redis: RedisServer, duration: float, t0: float, events: list) -> None:
    """Kill engine 1 at 25 % and start it again at once; stop Redis at 55 %, start it at 70 %."""
    loop = asyncio.get_running_loop()

    async def at(fraction: float, name: str, action) -> None:
        await asyncio.sleep(max(t0 + fraction * duration - time.perf_counter(), 0))
        events.append({"t_s": time.perf_counter() - t0, "event": name})
        await loop.run_in_executor(None, action)

    victim = engines[1]
    await at(0.25, "engine_kill", victim.kill)
    await at(0.25, "engine_restart", lambda: victim.start(wait=False))

    async def ready() -> None:
        await loop.run_in_executor(None, victim.wait_ready)
        events.append({"t_s": time.perf_counter() - t0, "event": "engine_ready"})

    ready_task = asyncio.create_task(ready())
    await at(0.55, "redis_stop", redis.stop)
    await at(0.70, "redis_start", redis.start)
    await ready_task


def write_outcomes(path: Path, rows: list[dict]) -> None:
    """One line per request (the JSON keeps the summary): what each request got and when."""
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})


def run(args) -> dict:
    folder = out_dir(args.out, "faults")
    logs = Path(tempfile.mkdtemp(prefix="faults-logs-"))
    tenants = logs / "tenants.yaml"
    tenants.write_text(f"tenants:\n  - {{name: bench, key_sha256: ['{hash_key(KEY)}'], rpm: 10000000, "
                       f"tpm: 1000000000, priority: 1}}\n")  # fmt: skip
    ports = [cluster.free_port() for _ in range(2)]
    if args.ci:
        engines = [cluster.double_engine(p, logs / f"engine{i}.log", args.token_delay, 0.05, args.max_running)
                   for i, p in enumerate(ports)]  # fmt: skip
        model = "tiny-moe"
    else:
        engines = [cluster.sglang_engine(p, logs / f"engine{i}.log", args.max_running, args.model)
                   for i, p in enumerate(ports)]  # fmt: skip
        model = Path(args.model).name if args.model else "moe-tiny"
    redis = RedisServer(persistent=True)
    gw = cluster.gateway(engines, redis, tenants, logs / "gateway.log",
                         ["--limits-outage", args.outage, "--fail-open-s", "60", "--model", model])  # fmt: skip
    trace = fitted(args)
    with cluster.running(engines, redis, gw):
        url = gw.url + "/v1/completions"
        probe_bodies = bodies_for(trace.requests[:64], model, args.max_input)
        pool = 2 * args.max_running * len(engines)  # the gateway's bound: queue_factor 2 x what the engines run
        capacity = asyncio.run(measure_capacity(url, probe_bodies, pool, args.probe_s))
        rate = args.load * capacity
        trace_rate = len(trace.requests) / max(trace.duration_s, 1e-9)
        scaled = sched.compress(trace, rate / trace_rate)
        requests = [r for r in scaled.requests if r.arrival_s < args.duration_s]
        bodies = bodies_for(requests, model, args.max_input)
        arrivals = [r.arrival_s for r in requests]
        print(f"capacity {capacity:.2f} req/s; replaying {len(requests)} requests at {rate:.2f} req/s "
              f"({args.load:g}x) for {args.duration_s:g} s", flush=True)  # fmt: skip

        async def replay_with_faults():
            t0 = time.perf_counter() + 0.2
            events: list[dict] = []
            sampler = Sampler(gw, [e.url for e in engines], t0)
            sampling = asyncio.create_task(sampler.run())
            plan = asyncio.create_task(faults_plan(engines, redis, args.duration_s, t0, events))
            outcomes = await replay_outcomes(url, {"Authorization": f"Bearer {KEY}"}, bodies, arrivals,
                                             args.timeout_s, args.ci, t0)  # fmt: skip
            await plan
            await asyncio.sleep(2 * 0.5)  # the settled state after the last answer
            sampler.stop()
            await sampling
            return outcomes, events, sampler.samples

        outcomes, events, samples = asyncio.run(replay_with_faults())
    result = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "engine": "test double" if args.ci else "SGLang CPU (bundled model)",
        "capacity_rps": capacity,
        "offered_rps": rate,
        "requests": len(outcomes),
        **summarize(outcomes),
        "recovery": recovery(events, samples, outcomes, [e.url for e in engines]),
        "events": events,
        "rss_mb": {"max": max(s["rss_mb"] for s in samples), "last": samples[-1]["rss_mb"]},
        "timeline": samples,
    }
    write_json(folder, "faults", result)
    write_outcomes(folder / "faults_requests.csv", [o.row() for o in outcomes])
    plot_timeline(outcomes, samples, events, [e.url for e in engines], folder / "faults.png")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="engine test doubles, ~20 s: the CI variant")
    parser.add_argument("--trace", choices=sorted(TRACES), default="mooncake")
    parser.add_argument("--traces", type=Path, default=default_traces())
    parser.add_argument("--model", default=None, help="engine checkpoint (default: the bundled moe-tiny)")
    parser.add_argument("--duration-s", type=float, default=None, help="seconds of replay (240; --ci 16)")
    parser.add_argument("--load", type=float, default=2.0, help="offered rate / measured capacity")
    parser.add_argument("--max-tokens", type=int, default=None, help="output tokens per request, at most (16; 12)")
    parser.add_argument("--max-input", type=int, default=128, help="prompt tokens per request, at most")
    parser.add_argument("--max-running", type=int, default=None, help="engine --max-running-requests (8; 4)")
    parser.add_argument("--probe-s", type=float, default=None, help="seconds of the capacity probe (30; 3)")
    parser.add_argument("--timeout-s", type=float, default=None, help="client gives up (lost) after this (180; 30)")
    parser.add_argument("--outage", choices=("open", "closed"), default="open", help="gateway --limits-outage")
    parser.add_argument("--token-delay", type=float, default=0.02, help="double only: seconds per token")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    for name, value in (CI if args.ci else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not (args.traces / TRACES[args.trace]).exists():
        parser.error(f"trace not found: {args.traces / TRACES[args.trace]}")
    result = run(args)
    print(table(result["table"], ["outcome", "count"]))
    print(table(result["errors_by_code"], ["status", "code", "count"]))
    print(json.dumps(result["recovery"], indent=2))
    print(
        f"gateway RSS max {result['rss_mb']['max']:.0f} MB; wrote {out_dir(args.out, 'faults')}/faults.json, "
        "faults_requests.csv, faults.png"
    )
    return 0 if result["lost"] == 0 and result["duplicated"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
