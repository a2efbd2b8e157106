"""Real traces per speculation policy and drafter: a window of the Mooncake and Azure 2023 conversation traces,
time-scaled to this machine, replayed open-loop (service/traces/replay.py); SLO attainment at SLO scale 0.8/1.0/1.2
with SLO = P90 TPOT of the same replay without speculation in the same repetition, goodput at scale 1.0, TPOT
p50/p99, and the TPOT speedup (median per-request TPOT of no speculation / the policy's) per drafter (NGRAM and
STANDALONE).

The SLO of a repetition is none's P90 in that repetition, interleaved with the policies it judges: a window whose
requests decode together has TPOTs within a few percent of each other, so an SLO measured once before the
repetitions judged every replay by the host's drift since (none read 0.167 at its own SLO in such runs). A P90
measured first, with every engine up, is still the SLO given to the policies as their TPOT hint (an operator's SLO
is set before the traffic), and attainment there is reported too (`pre_slo_x1`).

Fitting a datacenter trace to a 2-core CPU and a tiny model: inputs are clipped to the model's context
(service.traces.schedule.fit_context) after outputs are capped at --max-output tokens; the first --requests
requests are kept; arrivals are then compressed or stretched so the window's offered output-token rate is --load
times this machine's capacity, measured first on the no-speculation engine (closed loop, 8 streams).
The deciding setup (bench/_models.py deciding_setup(): model, inflation, drafters) is the default. The plain engine
(no drafter) and one engine per drafter are up together; a drafter's engine serves every policy, picked per request
by hints (`custom_params.moe_serve`). A second plain engine without SGLang's overlap scheduler gives "none-sync": the
speculative engines step synchronously, and the two modes stream a request's first token at different steps (with
overlap, after the next batch has run; bench.policies' docstring). Each repetition replays every policy of every
drafter, "none" and "none-sync" once per trace, in an order rotated by the repetition ("none" and "none-sync" are
every drafter's baseline); rows give the median and min-max over repetitions and, per repetition, the requests
that missed the SLO at x1 with their TTFT, TPOT, first and longest inter-token interval (`misses`). Caches are
flushed between replays. The goals are read against both baselines: against "none" (the issue's), and against
"none-sync" with its own SLO (P90 TPOT of a none-sync replay, measured first as well; `sync_slo_x1`,
`tpot_speedup_sync`), the no-speculation engine in the scheduling mode every speculative engine here runs in.

    python -m bench.replay [--model PATH] [--inflate N] [--draft-model PATH] [--drafters ngram,standalone]
                           [--repeats 3] [--traces DIR] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from dataclasses import replace
from pathlib import Path

from bench._cell import flush_cache
from bench._common import add_engine_threads_argument, figure, out_dir, save_figure, table, write_json
from bench._heldout import PROMPT_SETS, heldout_documents
from bench._load import run_batch, served_model
from bench._models import add_setup_arguments, bench_engine, read_checkpoint, setup_from_args, timed_model
from bench._replay_read import SLO_SCALES, aggregate, goals, judged
from bench.policies import speculation
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from service.traces import replay as replay_module
from service.traces import schedule as sched
from service.traces.formats import load_trace
from service.traces.report import summarize
from service.traces.types import Schedule

# SGLang refuses a prompt longer than context - 6 (tp_worker.py: max_req_len = context - 1, inputs up to max_req_len -
# 5), and a refused streamed request ends with no text and no error event: inputs + outputs are kept within that
INPUT_ROOM = 6
TRACES = {"mooncake": "mooncake_conversation_trace.jsonl", "azure": "azure_llm_2023_conv.csv"}
POLICIES = {
    "static-3": {"policy": "static", "max_k": 3},
    "sglang-adaptive": {"policy": "sglang-adaptive"},
    "cascade": {"policy": "cascade"},
    "adaspec": {"policy": "adaspec"},
    "moe-serve": {"policy": "moe-serve"},
}
# Not a policy and not in the default run: the drafter engine with every request at K = 0, for development runs that
# separate what a drafter's engine costs where nothing speculates from what a policy decided (`--policies k0,moe-serve`)
FLOOR = {"k0": {"policy": "static", "max_k": 0}}


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
    flush_cache(url)
    # skip_special_tokens=False: end-of-text tokens (ignore_eos keeps generating) stream as text the replayer times
    extra = {"skip_special_tokens": False} | ({} if hints is None else {"custom_params": {"moe_serve": hints}})
    config = replay_module.ReplayConfig(url=url, model=served_model(url), timeout_s=300, extra_body=extra)
    return asyncio.run(replay_module.replay(s, prompts, config))


# Output tokens per second of the no-speculation engine at 8 streams on moe-tiny x8 (2-core EPYC, 1 engine thread)
# and an engine start: the dry estimate's inputs.
CAPACITY_TOKENS_PER_S = 69.0
ENGINE_START_S = 80.0


def default_estimate(requests: int = 12, max_output: int = 24, load: float = 0.7, repeats: int = 3) -> float:
    """Dry estimate of a default run: every replay lasts about its window's output tokens / (load x capacity)."""
    replay_s = requests * max_output / (load * CAPACITY_TOKENS_PER_S) + 3.0
    drafters, traces = 2, len(TRACES)
    variants = 2 + drafters * len(POLICIES)  # none and none-sync, shared by both drafters' policies
    return (2 + drafters) * ENGINE_START_S + traces * replay_s * (1 + repeats * variants)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_setup_arguments(parser, drafters=True)
    parser.add_argument("--traces", type=Path, default=default_traces(), help="folder with the trace files")
    parser.add_argument("--requests", type=int, default=12, help="requests replayed per trace")
    parser.add_argument("--max-output", type=int, default=24, help="output tokens per request, at most")
    parser.add_argument("--load", type=float, default=0.7, help="offered load as a fraction of measured capacity")
    parser.add_argument("--repeats", type=int, default=3, help="replays per (trace, drafter, policy); median, min-max")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: one trace, 3 short requests, the NGRAM engine only (none = a K=0 hint), 2 policies",
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help="the policies besides none and none-sync (a development run; the goals need all of them); "
        "k0 = the drafter engine at K = 0",
    )
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    chosen = [p for p in args.policies.split(",") if p]
    unknown = sorted(set(chosen) - set(POLICIES) - set(FLOOR))
    if unknown:
        parser.error(f"unknown policies {unknown}: expected some of {', '.join([*POLICIES, *FLOOR])}")
    folder = out_dir(args.out, "replay")
    setup = setup_from_args(args)
    model = timed_model(setup)
    context = read_checkpoint(model).context
    traces = {"mooncake": TRACES["mooncake"]} if args.quick else TRACES
    requests, max_output = (3, 6) if args.quick else (args.requests, args.max_output)
    policies = {k: (POLICIES | FLOOR)[k] for k in (("static-3", "moe-serve") if args.quick else chosen)}
    drafters = setup.drafters[:1] if args.quick else setup.drafters
    repeats = 1 if args.quick else args.repeats
    missing = [name for name in traces.values() if not (args.traces / name).exists()]
    if missing:
        raise SystemExit(f"trace files {missing} not in {args.traces} (pass --traces DIR)")

    import transformers

    streams = heldout_streams(transformers.AutoTokenizer.from_pretrained(model))
    schedules, prompts = {}, {}
    for name, file in traces.items():
        schedules[name] = fitted_schedule(args.traces / file, context - INPUT_ROOM, max_output, requests)
        prompts[name] = trace_prompts(schedules[name], streams)

    started = time.perf_counter()
    replays: dict[tuple, object] = {}  # (repetition, trace, drafter or None, policy) -> its ReplayResult
    slo, sync_slo, meta = {}, {}, {}

    def engine(spec):
        return bench_engine(model, spec, args.engine_threads)

    def engine_with(spec, extra):
        return bench_engine(model, spec, args.engine_threads, extra=extra)

    with contextlib.ExitStack() as stack:
        # --quick: one engine start; the baseline is then a K=0 hint on the drafter engine
        first = speculation(drafters[0], setup)
        plain_url = stack.enter_context(
            running_engine(engine(first if args.quick else SpeculationConfig()), log_path=folder / "engine-none.log")
        )
        # the speculative engines step synchronously; "none-sync" (a plain engine without SGLang's overlap scheduler)
        # shows what that mode alone does to attainment (bench.policies' docstring: the two modes time TPOT apart)
        sync_url = (
            None
            if args.quick
            else stack.enter_context(
                running_engine(
                    engine_with(SpeculationConfig(), ("--disable-overlap-schedule",)),
                    log_path=folder / "engine-none-sync.log",
                )
            )
        )
        # both drafter engines up together, and up before the SLO is measured, as they are while it is read:
        # "none" and "none-sync" are replayed once per repetition and trace, in the same rotation as both drafters'
        # policies, and each drafter's rows share them
        urls = {
            drafter: plain_url
            if args.quick
            else stack.enter_context(
                running_engine(engine(speculation(drafter, setup)), log_path=folder / f"engine-{drafter}.log")
            )
            for drafter in drafters
        }
        off = {"policy": "static", "max_k": 0} if args.quick else None
        # token ids, cut so that max_output more tokens fit the context
        texts = [p[: context - 1 - max_output] for ps in prompts.values() for p in ps][:8]
        extra = None if off is None else {"custom_params": {"moe_serve": off}}
        capacity = run_batch(plain_url, served_model(plain_url), texts, max_output, 8, extra)["tokens_per_s"]
        for name in traces:  # the policies' TPOT hint: P90 TPOT of a replay without speculation, before any policy
            schedules[name] = scaled_to(schedules[name], capacity, args.load)
            result = replay_once(plain_url, schedules[name], prompts[name], off)
            slo[name] = summarize(result)["tpot_ms"]["p90"]
            if sync_url is not None:  # the same in the speculative engines' synchronous mode (goals against both)
                sync_slo[name] = summarize(replay_once(sync_url, schedules[name], prompts[name], off))["tpot_ms"]["p90"]
            meta[name] = {"schedule": schedules[name].source, "duration_s": schedules[name].duration_s}
        shared = {"none": (plain_url, off)} | ({} if sync_url is None else {"none-sync": (sync_url, off)})
        variants = {(None, p): target for p, target in shared.items()}
        variants |= {(drafter, p): (url, h) for drafter, url in urls.items() for p, h in policies.items()}
        for rep in range(repeats):
            for name in traces:
                keys = list(variants)
                for drafter, policy in keys[rep % len(keys) :] + keys[: rep % len(keys)]:
                    target, hints = variants[(drafter, policy)]
                    if drafter is not None:
                        hints = {"tpot_ms": slo[name], **hints}
                    replays[(rep, name, drafter, policy)] = replay_once(target, schedules[name], prompts[name], hints)
                print(f"rep {rep} {name}: done at {time.perf_counter() - started:.0f} s", flush=True)
    runs, rep_slo = judged(replays, drafters, slo, sync_slo)
    rows = aggregate(runs)
    goal_rows = goals(rows)
    columns = ["drafter", "trace", "policy", "slo_x1", "slo_x1_min", "slo_x1_max", "tpot_p50_ms", "tpot_speedup"]
    columns += ["sync_slo_x1", "tpot_speedup_sync"] if sync_slo else []
    columns += ["pre_slo_x1"]
    print(
        f"capacity without speculation: {capacity:.1f} output tokens/s; SLO measured first (P90 TPOT, ms; the "
        f"policies' hint): {slo}, none-sync {sync_slo}; per repetition: {rep_slo}"
    )
    print(table(rows, [*columns, "goodput_rps", "accept_length", "failed"]))
    print(table(goal_rows, ["goal", "value", "target", "met", "detail"]))
    payload = {
        "model": str(model),
        "setup": {"model": str(setup.model), "inflate": setup.inflate, "draft_model": str(setup.draft_model)},
        "drafters": list(drafters),
        "repeats": repeats,
        "baseline": "K=0 hint on the drafter engine" if args.quick else "plain engine (no drafter)",
        "capacity_tokens_per_s": capacity,
        "load": args.load,
        "slo_tpot_ms": slo,
        "sync_slo_tpot_ms": sync_slo,
        "slo_tpot_ms_per_repeat": rep_slo,
        "seconds": time.perf_counter() - started,
    }
    path = write_json(folder, "replay", {**payload, "schedules": meta, "rows": rows, "goals": goal_rows})
    _plot(rows, folder / "replay.png")
    print(f"wrote {path}")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    panels = list(dict.fromkeys((r["drafter"], r["trace"]) for r in rows))
    fig, axes = figure(len(panels), (5 * len(panels), 3.6))
    for ax, (drafter, trace) in zip(axes, panels, strict=True):
        mine = [r for r in rows if (r["drafter"], r["trace"]) == (drafter, trace)]
        for scale in SLO_SCALES:
            ax.plot([r["policy"] for r in mine], [r[f"slo_x{scale:g}"] for r in mine], "o-", label=f"SLO x{scale:g}")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("SLO attainment (TPOT), median")
        ax.set_title(f"{trace}, {drafter}")
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
        ax.legend(fontsize=7)
    save_figure(fig, path, "Trace replay: TPOT SLO attainment per policy (SLO = P90 TPOT without speculation)")


if __name__ == "__main__":
    raise SystemExit(main())
