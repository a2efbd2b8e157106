"""Engine start of the CPU engine as moe-serve starts it against SGLang's way, one change at a time:

    default      scheduler and detokenizer processes forked from the launcher (`process_start=fork`,
                 moe_sglang/process_start.py), product forms read from the machine's plan cache (`gemm_plan=cached`,
                 service/kernels/plan_cache.py)
    spawn        SGLang's own start method, forms from the cache
    tune         forked, forms timed at the start
    spawn+tune   both as before (the baseline: how every engine started until 2026-11-28)

Each round starts one engine per variant, one at a time, in rotated order, on the same model and thread count (an
unmeasured start first fills the plan cache), and measures:
- start to first token: from launching the server process to the first completion's answer (imports, model load,
  warm-up included; as bench.decode_peer);
- plain-decode TPOT at batch 1 and 8 (bench.decode_peer's difference of two output lengths): a forked process
  must decode as fast as a spawned one;
- memory after that load: the sum of resident memory (RSS) over the server's process tree at its peak, as
  bench.decode_peer reports it, and the sum of proportional set sizes (PSS: a page shared by n processes counts
  1/n in each), which counts pages a fork shares with the launcher once instead of once per process.
Each round's ratio to the baseline is kept; the report gives the median and min-max of those ratios. One engine's
TPOT against another's is as noisy as the shared machine over the minutes between them (plan_cache.py), so
`--side-by-side N` also runs `default` and `spawn` up together, requests alternating between them for N rounds
(batch 1, the same TPOT measurement): forked / spawned decode TPOT per round, without the drift.

    python -m bench.engine_start [--model PATH] [--repeats 3] [--side-by-side 8] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from pathlib import Path

import psutil

from bench._common import add_engine_threads_argument, cpu_info, out_dir, table, write_json
from bench._heldout import prompt_sets
from bench._models import resolve_model
from bench.decode_peer import PROMPT_TOKENS, _listening_pid, _session_leader, decode_tpot_ms, started
from bench.policies import as_token_ids
from moe_sglang.launch import DEFAULT_MODEL
from moe_sglang.settings import EngineSettings

METRICS = ("start_to_first_token_s", "tpot_b1_ms", "tpot_b8_ms", "peak_rss_mb", "pss_mb")
VARIANTS = {  # the baseline last
    "default": EngineSettings(),
    "spawn": EngineSettings(process_start="spawn"),
    "tune": EngineSettings(gemm_plan="tune"),
    "spawn+tune": EngineSettings(process_start="spawn", gemm_plan="tune"),
}
SIDE = ("default", "spawn")  # --side-by-side: forked / spawned


def tree_pss_mb(url: str) -> float:
    """Sum of the proportional set sizes of the server's process tree, in MiB."""
    root = psutil.Process(_session_leader(_listening_pid(url)))
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_full_info().pss
    return total / 2**20


def measure(
    model: Path, settings: EngineSettings, threads: int, folder: Path, prompts: list, tokens: tuple[int, int]
) -> dict:
    with started("moe-serve", model, threads, folder, None, settings) as engine:
        url, served = engine["url"], engine["model"]
        row = {"start_to_first_token_s": engine["start_to_first_token_s"]}
        row["tpot_b1_ms"] = decode_tpot_ms(url, served, prompts[:1], *tokens)
        row["tpot_b8_ms"] = decode_tpot_ms(url, served, prompts[:8], *tokens)
        row["pss_mb"] = tree_pss_mb(url)
        row["peak_rss_mb"] = engine["rss"].stop() / 2**20
    return row


def side_by_side(model: Path, threads: int, folder: Path, prompts: list, tokens: tuple[int, int], rounds: int) -> dict:
    """`default` and `spawn` up together, batch-1 TPOT alternating between them; the per-round ratios."""
    with contextlib.ExitStack() as stack:
        up = {n: stack.enter_context(started("moe-serve", model, threads, folder, None, VARIANTS[n])) for n in SIDE}
        for engine in up.values():
            decode_tpot_ms(engine["url"], engine["model"], prompts[:1], *tokens)  # warm
        ratios = []
        for round_ in range(rounds):
            tpot = {}
            for name in SIDE if round_ % 2 == 0 else SIDE[::-1]:
                tpot[name] = decode_tpot_ms(up[name]["url"], up[name]["model"], prompts[:1], *tokens)
            ratios.append(tpot[SIDE[0]] / tpot[SIDE[1]])
    return {"ratios": ratios, "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def summarize(rows: list[dict], variants: list[str]) -> list[dict]:
    """Per metric: each variant's median and min-max, and the median and min-max of the per-round ratios to the
    last variant (the baseline)."""
    base = variants[-1]
    summary = []
    for metric in METRICS:
        row: dict = {"metric": metric}
        for v in variants:
            values = [r[v][metric] for r in rows]
            row[v] = statistics.median(values)
            row[f"{v}_range"] = f"{min(values):.1f}-{max(values):.1f}"
        for v in variants[:-1]:
            ratios = [r[v][metric] / r[base][metric] for r in rows]
            row[f"{v}/{base}"] = statistics.median(ratios)
            row[f"{v}/{base}_range"] = f"{min(ratios):.2f}-{max(ratios):.2f}"
        summary.append(row)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL), help="checkpoint folder (default: `moe-serve up`'s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", default="8,72", help="n1,n2: the two output lengths of the TPOT measurement")
    parser.add_argument("--side-by-side", type=int, default=8, help="rounds of forked vs spawned up together (0: none)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, short outputs")
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "engine_start")
    model = resolve_model(args.model)
    repeats = 1 if args.quick else args.repeats
    tokens = (4, 12) if args.quick else tuple(int(n) for n in args.tokens.split(","))
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["mixed"]
    variants = list(VARIANTS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="engine-start-") as tmp:
        with started("moe-serve", model, args.engine_threads, Path(tmp), None, VARIANTS["default"]):
            pass  # fills the plan cache where this machine has none for this model's shapes yet
        for round_ in range(repeats):
            turn = round_ % len(variants)
            row: dict = {"round": round_}
            for name in variants[turn:] + variants[:turn]:
                row[name] = measure(model, VARIANTS[name], args.engine_threads, Path(tmp), prompts, tokens)
            rows.append(row)
            print(f"round {round_}: " + ", ".join(f"{v} {row[v]['start_to_first_token_s']:.1f} s" for v in variants))
        rounds = 0 if args.quick else args.side_by_side
        pair = side_by_side(model, args.engine_threads, Path(tmp), prompts, tokens, rounds) if rounds else None
    summary = summarize(rows, variants) if rows else []
    if summary:
        print(table(summary, list(summary[0])))
    if pair:
        print(f"side by side, forked / spawned TPOT b1: {pair['median']:.3f} [{pair['min']:.3f}, {pair['max']:.3f}]")
    payload = {
        "cpu": cpu_info(),
        "model": model.name,
        "engine_threads": args.engine_threads,
        "variants": {
            name: {"process_start": v.process_start, "gemm_plan": v.gemm_plan} for name, v in VARIANTS.items()
        },
        "tokens": list(tokens),
        "prompt_tokens": PROMPT_TOKENS,
        "summary": summary,
        "rows": rows,
        "side_by_side": pair,
    }
    print(f"wrote {write_json(folder, 'engine_start', payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
