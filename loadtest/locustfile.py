"""Locust load test shaped by a real trace: requests fire at the trace's arrival times (issue 6, item 4).

    locust -f loadtest/locustfile.py --headless --host http://127.0.0.1:30000 \
        --trace ../shared/traces/mooncake_conversation_trace.jsonl --trace-window 0:60 --model NAME --tokenizer PATH

An arrival-only trace (a `Timestamp` column, as AdaSpec's) takes its lengths from another trace or fixed values:
`--trace arrivals.csv --lengths-from ../shared/traces/azure_llm_2023_conv.csv --trace-seed 0`, or `--input-tokens N
--output-tokens M` (see service/traces/arrivals.py).

Each free user takes the next trace request and sends it at `start + arrival` (open loop while the pool suffices;
`TraceShape` grows the pool from the trace, see trace_shape.py). Besides locust's own row for the HTTP call, it reports
TTFT, TPOT ((E2E - TTFT) / (tokens - 1), vllm's definition) and schedule lateness as locust statistics, in ms.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# locust puts this file's folder on sys.path (and takes it off again after import), not the repository root that
# holds `service`: import everything from there now.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gevent  # noqa: E402
from locust import HttpUser, LoadTestShape, constant, events, task  # noqa: E402
from locust.exception import StopUser  # noqa: E402

from loadtest.trace_shape import PoolSize, TraceClock  # noqa: E402
from service.traces import schedule as sched  # noqa: E402
from service.traces.cli import add_length_arguments, load_schedule, load_tokenizer  # noqa: E402
from service.traces.prompts import PromptBuilder  # noqa: E402


class TraceRun:
    """What one locust run replays; built once from the command line in `on_init`."""

    def __init__(self, requests, prompts, model: str, e2e_guess_s: float):
        self.requests = requests
        self.prompts = prompts
        self.model = model
        self.clock = TraceClock([r.arrival_s for r in requests])
        self.pool = PoolSize([r.arrival_s for r in requests], e2e_guess_s)
        self.finished = 0  # requests that ended, successfully or not


RUN: TraceRun | None = None  # set by on_init: locust offers no other hand-off from options to users


@events.init_command_line_parser.add_listener
def add_options(parser) -> None:
    parser.add_argument("--trace", help="trace file (Mooncake JSONL, Azure CSV, BurstGPT CSV, Timestamp-only CSV)")
    parser.add_argument("--trace-format", default="auto")
    add_length_arguments(parser)  # lengths of an arrival-only trace
    parser.add_argument("--trace-seed", type=int, default=0, help="seed of the lengths drawn (--lengths-from)")
    parser.add_argument("--trace-window", default="0:", help="START:END in trace seconds")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--context-len", type=int, default=0)
    parser.add_argument("--model", default="default")
    parser.add_argument("--tokenizer", help="tokenizer.json, directory or hub name for prompt synthesis")
    parser.add_argument("--e2e-guess-s", type=float, default=30.0, help="request duration used to size the pool")


@events.init.add_listener
def on_init(environment, **_kwargs) -> None:
    global RUN
    opts = environment.parsed_options
    if opts is None or not opts.trace:
        return
    s = sched.failed_requests(load_schedule(opts.trace, opts.trace_format, opts, seed=opts.trace_seed), "drop")
    s = sched.compress(sched.window(s, *sched.parse_window(opts.trace_window)), opts.time_scale)
    if opts.context_len:
        s, _ = sched.fit_context(s, opts.context_len)
    builder = PromptBuilder(load_tokenizer(opts.tokenizer or opts.model))
    RUN = TraceRun(s.requests, [builder.build(r) for r in s.requests], opts.model, opts.e2e_guess_s)


class TraceShape(LoadTestShape):
    """User count from the trace (never shrinking); stops once the last request is due and `drain_s` has passed."""

    drain_s = 30.0

    def tick(self):
        if RUN is None:
            return None
        run_time = self.get_run_time()
        if run_time > RUN.pool.last_arrival_s + self.drain_s or RUN.finished >= len(RUN.requests):
            return None
        return RUN.pool.users_needed(run_time), 100


class TraceUser(HttpUser):
    wait_time = constant(0)

    @task
    def fire(self) -> None:
        item = RUN.clock.take() if RUN is not None else None
        if item is None:
            raise StopUser()
        index, due = item
        delay = due - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        _report(self.environment, "lateness", (time.monotonic() - due) * 1000)
        try:
            self._send(index)
        finally:
            RUN.finished += 1

    def _send(self, index: int) -> None:
        request = RUN.requests[index]
        body = {
            "model": RUN.model,
            "prompt": RUN.prompts[index],
            "max_tokens": request.output_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        sent = time.monotonic()
        first = last = None
        tokens = None
        with self.client.post("/v1/completions", json=body, stream=True, catch_response=True, name="completions") as r:
            if r.status_code != 200:
                r.failure(f"HTTP {r.status_code}")
                return
            for line in r.iter_lines():
                if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if any(c.get("text") for c in chunk.get("choices") or []):
                    last = time.monotonic()
                    first = first or last
                if chunk.get("usage"):
                    tokens = chunk["usage"].get("completion_tokens")
            if first is None:
                r.failure("stream ended without any text")
                return
            r.success()
        end = time.monotonic()
        _report(self.environment, "TTFT", (first - sent) * 1000)
        n_out = tokens or request.output_tokens
        if n_out > 1:
            _report(self.environment, "TPOT", (end - sent - (first - sent)) / (n_out - 1) * 1000)


def _report(environment, name: str, ms: float) -> None:
    environment.events.request.fire(
        request_type="trace", name=name, response_time=ms, response_length=0, exception=None, context={}
    )
