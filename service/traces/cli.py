"""`moe-serve replay TRACE`: replay a request trace against an OpenAI-compatible server and write a report.

Order of transforms: failed rows (BurstGPT) -> window (trace seconds) -> thin -> overlay -> time scale -> context fit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from service.traces.formats import FORMATS, load_trace
from service.traces.types import Schedule


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace", help="trace file: Mooncake JSONL, Azure 2023 CSV, BurstGPT CSV or arrival times only (Timestamp CSV)"
    )
    parser.add_argument("--format", default="auto", choices=["auto", *FORMATS])
    add_length_arguments(parser)
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    parser.add_argument("--model", required=True, help="model name sent with each request")
    parser.add_argument("--tokenizer", help="tokenizer.json, a tokenizer directory or hub name (default: --model)")
    parser.add_argument("--window", default="0:", help="START:END in trace seconds (before --time-scale)")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="divide arrival times by this (2 = twice the rate)"
    )
    parser.add_argument("--thin", type=float, default=1.0, help="keep this fraction of sessions")
    parser.add_argument("--overlay", type=int, default=1, help="merge this many shifted copies (disjoint prefixes)")
    parser.add_argument("--overlay-shift", type=float, default=1.0, help="seconds between overlaid copies")
    parser.add_argument("--context-len", type=int, help="the model's context length; longer requests are fitted")
    parser.add_argument("--context-mode", default="clip", choices=["clip", "skip"])
    parser.add_argument(
        "--max-output-tokens", type=int, default=None, help="cap outputs (applied before fitting the context)"
    )
    parser.add_argument("--failed", default="drop", choices=["drop", "one-token"], help="BurstGPT failed rows")
    parser.add_argument("--max-requests", type=int, help="replay only the first N requests after the transforms")
    parser.add_argument("--slo-ttft-ms", type=float)
    parser.add_argument("--slo-tpot-ms", type=float)
    parser.add_argument("--slo-e2el-ms", type=float)
    parser.add_argument("--api-key", help="sent as a Bearer token")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per-request timeout")
    parser.add_argument("--no-spec-stats", action="store_true", help="do not ask the server for speculation stats")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="report directory")


def add_length_arguments(parser) -> None:
    """Lengths for arrival-only traces (service/traces/arrivals.py); the locustfile takes the same options."""
    parser.add_argument(
        "--lengths-from", help="arrival-only trace: draw (input, output) lengths from this trace's requests (--seed)"
    )
    parser.add_argument("--lengths-format", default="auto", help="format of --lengths-from (default: detected)")
    parser.add_argument("--input-tokens", type=int, help="arrival-only trace: every prompt this many tokens")
    parser.add_argument("--output-tokens", type=int, help="arrival-only trace: every output this many tokens")
    parser.add_argument("--arrival-unit", default="s", choices=["s", "ms"], help="arrival-only trace: timestamp unit")


def load_schedule(path: str, fmt: str, args, seed: int = 0) -> Schedule:
    """The trace at `path`, with lengths from the add_length_arguments options when it records none."""
    from service.traces.arrivals import lengths_from

    lengths = None
    if args.lengths_from or args.input_tokens or args.output_tokens:
        source = load_trace(args.lengths_from, args.lengths_format) if args.lengths_from else None
        lengths = lengths_from(source, input_tokens=args.input_tokens, output_tokens=args.output_tokens, seed=seed)
    return load_trace(path, fmt, lengths, 0.001 if args.arrival_unit == "ms" else 1.0)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from service.traces import schedule as sched
    from service.traces.prompts import PromptBuilder
    from service.traces.replay import ReplayConfig, replay
    from service.traces.report import Slo, summarize, time_series
    from service.traces.report_files import write_report

    s = load_schedule(args.trace, args.format, args, seed=args.seed)
    loaded = len(s)
    s = sched.failed_requests(s, args.failed)
    s = sched.window(s, *sched.parse_window(args.window))
    if args.thin < 1.0:
        s = sched.thin(s, args.thin, seed=args.seed)
    if args.overlay > 1:
        s = sched.overlay(s, args.overlay, args.overlay_shift)
    if args.time_scale != 1.0:
        s = sched.compress(s, args.time_scale)
    if args.max_output_tokens:
        s, capped = sched.cap_output(s, args.max_output_tokens)
        print(f"output capped at {args.max_output_tokens} tokens for {capped} request(s)")
    fit = None
    if args.context_len:
        s, fit = sched.fit_context(s, args.context_len, args.context_mode)
    if args.max_requests is not None:
        s = type(s)(s.requests[: args.max_requests], f"{s.source}/first{args.max_requests}")
    if not len(s):
        print(f"no requests left in {s.source}")
        return 1

    builder = PromptBuilder(load_tokenizer(args.tokenizer or args.model), seed=args.seed)
    prompts = [builder.build(r) for r in tqdm(s.requests, desc="prompts", unit="req")]
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    config = ReplayConfig(
        url=args.url, model=args.model, timeout_s=args.timeout_s, spec_stats=not args.no_spec_stats, headers=headers
    )
    print(f"replaying {len(s)} requests over {s.duration_s:.1f} s ({s.source}) -> {config.endpoint}")
    with tqdm(total=len(s), desc="replay", unit="req") as bar:
        result = asyncio.run(replay(s, prompts, config, on_done=lambda _: bar.update(1)))

    slo = Slo(ttft_ms=args.slo_ttft_ms, tpot_ms=args.slo_tpot_ms, e2el_ms=args.slo_e2el_ms)
    summary = summarize(result, slo)
    meta = {
        "title": s.source,
        "trace": str(args.trace),
        "schedule": s.source,
        "loaded_requests": loaded,
        "context_fit": None
        if fit is None
        else {"clipped": fit.clipped, "skipped": fit.skipped, "tokens": fit.context_tokens},
        "url": config.endpoint,
        "model": args.model,
        "started_unix_s": result.started_unix_s,
    }
    paths = write_report(args.out, result, summary, time_series(result), meta)
    print(json.dumps(_headline(summary), indent=2))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0 if summary["completed"] else 1


def load_tokenizer(name: str):
    if name.endswith(".json") and Path(name).is_file():
        from tokenizers import Tokenizer

        return Tokenizer.from_file(name)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def _headline(summary: dict) -> dict:
    def pick(dist: dict | None, *keys: str) -> dict | None:
        return None if dist is None else {k: round(dist[k], 2) for k in keys}

    return {
        "completed": summary["completed"],
        "failed": summary["failed"],
        "request_throughput": round(summary["request_throughput"], 3),
        "output_throughput": round(summary["output_throughput"], 1),
        "ttft_ms": pick(summary["ttft_ms"], "median", "p99"),
        "tpot_ms": pick(summary["tpot_ms"], "median", "p99"),
        "lateness_ms": pick(summary["lateness_ms"], "median", "p99"),
        "request_goodput": summary["request_goodput"],
        "slo_attainment": summary["slo_attainment"],
    }
