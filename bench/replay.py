"""Real traces per speculation policy: a window of the Mooncake and Azure 2023 conversation traces, time-scaled to
this machine, replayed open-loop (service/traces/replay.py) once per policy; SLO attainment at SLO scale 0.8/1.0/1.2
with SLO = P90 TPOT of the same replay without speculation, goodput at scale 1.0, TPOT p50/p99.

Fitting a datacenter trace to a 2-core CPU and a tiny model: inputs are clipped to the model's context
(service.traces.schedule.fit_context) after outputs are capped at --max-output tokens; the first --requests
requests are kept; arrivals are then compressed or stretched so the window's offered output-token rate is --load
times this machine's capacity, measured first on the no-speculation engine (closed loop, 8 streams).
Policies share one SGLang NGRAM engine, picked per request by hints (`custom_params.moe_serve`); the no-speculation
baseline runs on its own engine. Caches are flushed between replays.

    python -m bench.replay [--model PATH] [--traces DIR] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from dataclasses import replace
from pathlib import Path

import httpx

from bench._common import add_engine_threads_argument, figure, out_dir, save_figure, table, write_json
from bench._heldout import PROMPT_SETS, heldout_documents
from bench._load import run_batch, served_model
from bench._models import read_checkpoint, resolve_model
from moe_sglang.launch import EngineConfig, SpeculationConfig
from moe_sglang.server import running_engine
from service.traces import replay as replay_module
from service.traces import schedule as sched
from service.traces.formats import load_trace
from service.traces.report import Slo, goodput, summarize
from service.traces.types import Schedule

TRACES = {"mooncake": "mooncake_conversation_trace.jsonl", "azure": "azure_llm_2023_conv.csv"}
SLO_SCALES = (0.8, 1.0, 1.2)
POLICIES = {
    "static-3": {"policy": "static", "max_k": 3},
    "sglang-adaptive": {"policy": "sglang-adaptive"},
    "cascade": {"policy": "cascade"},
    "adaspec": {"policy": "adaspec"},
    "moe-serve": {"policy": "moe-serve"},
}


def default_traces() -> Path:
    # as tests/traces/conftest.py: shared/ beside the repository, or MOE_SERVE_TRACES_DIR (e.g. from a git worktree)
    return Path(os.environ.get("MOE_SERVE_TRACES_DIR") or Path(__file__).resolve().parents[2] / "shared" / "traces")


def fitted_schedule(path: Path, context: int, max_output: int, requests: int) -> Schedule:
    s = load_trace(path)
    capped = tuple(replace(r, output_tokens=min(r.output_tokens, max_output)) for r in s.requests)
    s = Schedule(capped, f"{s.source}/out<={max_output}")
    s, _ = sched.fit_context(s, context, "clip")
    return Schedule(s.requests[:requests], f"{s.source}/first{requests}")


def heldout_streams(tokenizer, docs: int = 12) -> list[list[int]]:
    """One token stream per domain: held-out documents of the bundled model's corpus, concatenated."""
    return [
        [t for doc in heldout_documents(domain, docs) for t in tokenizer(doc)["input_ids"]]
        for domain in PROMPT_SETS.values()
    ]


def trace_prompts(s: Schedule, streams: list[list[int]]) -> list[list[int]]:
    """Request i gets exactly its trace input length of held-out tokens, domains taking turns. Held-out text rather
    than service.traces.prompts' random words: on random words the small model soon emits only end-of-text tokens,
    which n-gram drafts predict trivially, flattering speculation."""
    out = []
    for i, r in enumerate(s.requests):
        stream = streams[i % len(streams)]
        if len(stream) < r.input_tokens:
            raise RuntimeError(
                f"held-out stream of {len(stream)} tokens is shorter than a {r.input_tokens}-token prompt"
            )
        start = (i * 997) % (len(stream) - r.input_tokens + 1)
        out.append(stream[start : start + r.input_tokens])
    return out


def scaled_to(s: Schedule, capacity_tokens_per_s: float, load: float) -> Schedule:
    """Arrivals compressed so the offered output-token rate is `load` × capacity."""
    offered = sum(r.output_tokens for r in s.requests) / max(s.duration_s, 1e-9)
    return sched.compress(s, load * capacity_tokens_per_s / offered)


def replay_once(url: str, s: Schedule, prompts: list[str], hints: dict | None):
    httpx.post(f"{url}/flush_cache", timeout=60).raise_for_status()
    # skip_special_tokens=False: end-of-text tokens (ignore_eos keeps generating) stream as text the replayer times
    extra = {"skip_special_tokens": False} | ({} if hints is None else {"custom_params": {"moe_serve": hints}})
    config = replay_module.ReplayConfig(url=url, model=served_model(url), timeout_s=300, extra_body=extra)
    return asyncio.run(replay_module.replay(s, prompts, config))


def row(trace: str, policy: str, result, slo_tpot_ms: float) -> dict:
    summary = summarize(result, Slo(tpot_ms=slo_tpot_ms))
    out = {"trace": trace, "policy": policy, "requests": len(result.records), "failed": summary["failed"]}
    out["errors"] = sorted({f"input {r.input_tokens}: {r.error}" for r in result.records if r.error})
    for scale in SLO_SCALES:
        g = goodput(result.records, Slo(tpot_ms=scale * slo_tpot_ms), result.duration_s)
        out[f"slo_x{scale:g}"] = g["slo_attainment"]
    out["goodput_rps"] = goodput(result.records, Slo(tpot_ms=slo_tpot_ms), result.duration_s)["request_goodput"]
    tpot = summary["tpot_ms"] or {}
    out["tpot_p50_ms"], out["tpot_p99_ms"] = tpot.get("median"), tpot.get("p99")
    out["accept_length"] = (summary.get("speculation") or {}).get("mean_accept_length")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="Mixtral checkpoint (default: the bundled moe-tiny)")
    parser.add_argument("--traces", type=Path, default=default_traces(), help="folder with the trace files")
    parser.add_argument("--requests", type=int, default=24, help="requests replayed per trace")
    parser.add_argument("--max-output", type=int, default=48, help="output tokens per request, at most")
    parser.add_argument("--load", type=float, default=0.7, help="offered load as a fraction of measured capacity")
    parser.add_argument("--quick", action="store_true", help="smoke run: one trace, 3 short requests, 2 policies")
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "replay")
    model = resolve_model(args.model)
    context = read_checkpoint(model).context
    traces = {"mooncake": TRACES["mooncake"]} if args.quick else TRACES
    requests, max_output = (3, 6) if args.quick else (args.requests, args.max_output)
    policies = {k: POLICIES[k] for k in ("static-3", "moe-serve")} if args.quick else POLICIES
    missing = [name for name in traces.values() if not (args.traces / name).exists()]
    if missing:
        raise SystemExit(f"trace files {missing} not in {args.traces} (pass --traces DIR)")

    import transformers

    streams = heldout_streams(transformers.AutoTokenizer.from_pretrained(model))
    schedules, prompts = {}, {}
    for name, file in traces.items():
        # SGLang keeps input + output below the context length: one token of room
        schedules[name] = fitted_schedule(args.traces / file, context - 1, max_output, requests)
        prompts[name] = trace_prompts(schedules[name], streams)

    rows, slo, meta = [], {}, {}
    ngram = EngineConfig(
        model_path=str(model),
        port=0,
        max_running_requests=16,
        speculation=SpeculationConfig("ngram", topk=1, num_draft_tokens=4),
        threads=args.engine_threads,
    )
    with contextlib.ExitStack() as stack:
        # --quick: one engine start; the baseline is then a K=0 hint on the NGRAM engine
        off = None if not args.quick else {"policy": "static", "max_k": 0}
        plain = ngram if args.quick else replace(ngram, speculation=SpeculationConfig())
        url = stack.enter_context(running_engine(plain, log_path=folder / "engine-none.log"))
        # token ids, cut so that max_output more tokens fit the context
        texts = [p[: context - 1 - max_output] for ps in prompts.values() for p in ps][:8]
        extra = None if off is None else {"custom_params": {"moe_serve": off}}
        capacity = run_batch(url, served_model(url), texts, max_output, 8, extra)["tokens_per_s"]
        for name in traces:
            schedules[name] = scaled_to(schedules[name], capacity, args.load)
            result = replay_once(url, schedules[name], prompts[name], off)
            slo[name] = summarize(result)["tpot_ms"]["p90"]
            rows.append(row(name, "none", result, slo[name]))
            meta[name] = {"schedule": schedules[name].source, "duration_s": schedules[name].duration_s}
        if not args.quick:
            stack.close()
            url = stack.enter_context(running_engine(ngram, log_path=folder / "engine-ngram.log"))
        for name in traces:
            for policy, hints in policies.items():
                result = replay_once(url, schedules[name], prompts[name], {"tpot_ms": slo[name], **hints})
                rows.append(row(name, policy, result, slo[name]))
    columns = ["trace", "policy", "slo_x0.8", "slo_x1", "slo_x1.2", "goodput_rps", "tpot_p50_ms", "tpot_p99_ms"]
    print(f"capacity without speculation: {capacity:.1f} output tokens/s; SLO (P90 TPOT, ms): {slo}")
    print(table(rows, [*columns, "accept_length", "failed"]))
    payload = {"model": str(model), "capacity_tokens_per_s": capacity, "load": args.load, "slo_tpot_ms": slo}
    path = write_json(folder, "replay", {**payload, "schedules": meta, "rows": rows})
    _plot(rows, folder / "replay.png")
    print(f"wrote {path}")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    fig, axes = figure(len(traces), (6 * len(traces), 3.6))
    for ax, trace in zip(axes, traces, strict=True):
        mine = [r for r in rows if r["trace"] == trace]
        for scale in SLO_SCALES:
            ax.plot([r["policy"] for r in mine], [r[f"slo_x{scale:g}"] for r in mine], "o-", label=f"SLO x{scale:g}")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("SLO attainment (TPOT)")
        ax.set_title(trace)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
        ax.legend(fontsize=7)
    save_figure(fig, path, "Trace replay: TPOT SLO attainment per policy (SLO = P90 TPOT without speculation)")


if __name__ == "__main__":
    raise SystemExit(main())
