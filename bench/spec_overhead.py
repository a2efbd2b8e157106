"""What speculation costs a request that does not use it, and what a ragged verify saves in a mixed batch.

1. K = 0: the same prompts at batch 1 and 8 on an engine without speculation (`plain`), and with K = 0 for every
   request (hint `max_k: 0`) on moe-serve's NGRAM and STANDALONE engines. A step where nobody speculates is a plain
   decode there (moe_sglang/plain_decode.py), so the goal is TPOT <= 1.02x plain. Variants take turns round by round
   (rotated order) and each round's ratio to plain is kept: the report gives the median and min-max of the ratios.
   A fourth engine, `plain-sync`, is the plain one with SGLang's overlap scheduler off (`--disable-overlap-schedule`):
   moe-serve's speculative steps are synchronous (moe_sglang/algorithm.py), the plain engine's are not, so this row
   says how much of a K = 0 gap the scheduler mode alone makes.
   Beside wall-clock TPOT, the ITL (median gap between a request's streamed tokens: the decode step as the client
   sees it, insensitive to when a scheduler streams the first token, bench/_load.py) and each engine's CPU seconds per
   output token (its process tree's user + system time): it stays meaningful when other jobs share the cores.
2. Ragged vs rectangular: a batch of 8 requests with K = 0, 1, 2, 3 (twice) on engines whose only difference is the
   verify layout (`ragged`: request i verifies min(K_i, D_i) + 1 tokens; `rectangular`: every request verifies the
   batch's largest). Greedy and lossless, so both run the very same steps: the verify tokens counted by the engines
   (moe_serve:verify_tokens_total) compare exactly; TPOT shows what the saving is worth.

    python -m bench.spec_overhead [--model PATH] [--draft PATH] [--repeats 5] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import statistics
from pathlib import Path

import httpx
import psutil

from bench._cell import flush_cache
from bench._common import add_engine_threads_argument, cpu_info, out_dir, table, write_json
from bench._heldout import prompt_sets
from bench._load import complete, run_batch, served_model
from bench._models import DENSE_DRAFTS, bench_engine, resolve_model
from bench.policies import as_token_ids
from moe_sglang.launch import DEFAULT_DRAFT_MODEL, EngineConfig, SpeculationConfig
from moe_sglang.metrics import VERIFY_TOKENS
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

MAX_K = 3  # drafts per request: NGRAM verifies up to 4 tokens, STANDALONE drafts 3 steps
K0 = {"custom_params": {"moe_serve": {"policy": "static", "max_k": 0}}}
MIXED_KS = (0, 1, 2, 3, 0, 1, 2, 3)


def speculation(algorithm: str, draft: Path) -> SpeculationConfig:
    if algorithm == "ngram":
        return SpeculationConfig("ngram", topk=1, num_draft_tokens=MAX_K + 1)
    return SpeculationConfig("standalone", draft_model_path=str(draft), num_steps=MAX_K, topk=1, num_draft_tokens=4)


def engine(
    model: Path,
    spec: SpeculationConfig,
    layout: str,
    threads: int,
    extra: tuple[str, ...] = (),
    burst: int | None = None,
) -> EngineConfig:
    """Every engine with metrics on (the default of `moe-serve engine`), so their cost is in every variant alike;
    `burst`: its plain_burst setting (None: the default, moe_sglang/plain_burst.py)."""
    settings = EngineSettings(verify_layout=layout)
    if burst is not None:
        settings = EngineSettings(verify_layout=layout, plain_burst=burst)
    return bench_engine(model, spec, threads, settings, ("--enable-metrics", *extra))


def cpu_seconds(url: str) -> float:
    """User + system CPU seconds of the server listening at `url` and all its children (scheduler, detokenizer)."""
    port = int(url.rsplit(":", 1)[1])
    pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    total = 0.0
    server = psutil.Process(pid)
    for proc in [server, *server.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def verify_tokens(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(VERIFY_TOKENS + "_total"))


def timed_run(url: str, prompts: list, tokens: int, batch: int, extra: dict | None) -> dict:
    flush_cache(url)
    cpu, counted = cpu_seconds(url), verify_tokens(url)
    result = run_batch(url, served_model(url), prompts, tokens, batch, extra)
    produced = result["requests"] * tokens
    result["cpu_ms_per_token"] = (cpu_seconds(url) - cpu) / produced * 1e3
    result["verify_tokens"] = verify_tokens(url) - counted
    return result


def k0_rows(urls: dict[str, str], prompts: list, tokens: int, batches, repeats: int) -> list[dict]:
    """Rounds of plain / plain-sync / ngram-k0 / standalone-k0 (and ngram-k0-burst-off where its engine runs) in
    rotated order; one row per (variant, batch, round)."""
    variants = {
        "plain": (urls["plain"], None),
        "plain-sync": (urls["plain-sync"], None),
        "ngram-k0": (urls["ngram"], K0),
        "standalone-k0": (urls["standalone"], K0),
    }
    if "ngram-burst-off" in urls:
        variants["ngram-k0-burst-off"] = (urls["ngram-burst-off"], K0)
    names, rows = list(variants), []
    for batch in batches:
        for round_ in range(repeats):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                url, extra = variants[name]
                rows.append(
                    {"variant": name, "batch": batch, "round": round_, **timed_run(url, prompts, tokens, batch, extra)}
                )
    return rows


def ratio_summary(rows: list[dict], metrics=("tpot_ms", "itl_ms", "cpu_ms_per_token")) -> list[dict]:
    """Per (variant, batch, metric): the median and min-max over rounds of variant / plain of the same round."""
    plain = {(r["batch"], r["round"]): r for r in rows if r["variant"] == "plain"}
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows if r["variant"] != "plain"):
        for batch in dict.fromkeys(r["batch"] for r in rows):
            mine = [r for r in rows if r["variant"] == variant and r["batch"] == batch]
            for metric in metrics:
                if any(r[metric] is None or plain[(batch, r["round"])][metric] is None for r in mine):
                    continue  # ITL of requests that streamed in one chunk: not measured
                ratios = [r[metric] / plain[(batch, r["round"])][metric] for r in mine]
                out.append(
                    {
                        "variant": variant,
                        "batch": batch,
                        "metric": metric,
                        "median_ratio": statistics.median(ratios),
                        "min_ratio": min(ratios),
                        "max_ratio": max(ratios),
                        "rounds": len(ratios),
                    }
                )
    return out


def layout_rows(urls: dict[str, str], drafter: str, prompts: list, tokens: int, repeats: int) -> list[dict]:
    """The mixed-K batch on the ragged and rectangular engines of one drafter, rounds alternating the order."""
    rows, order = [], ["ragged", "rectangular"]
    for round_ in range(repeats):
        for layout in order if round_ % 2 == 0 else order[::-1]:
            results = _mixed_batch(urls[layout], prompts, tokens)
            rows.append({"drafter": drafter, "layout": layout, "round": round_, **results})
    return rows


def _mixed_batch(url: str, prompts: list, tokens: int) -> dict:
    flush_cache(url)
    counted, cpu = verify_tokens(url), cpu_seconds(url)
    model = served_model(url)

    def one(i):
        extra = {"custom_params": {"moe_serve": {"policy": "static", "max_k": MIXED_KS[i]}}}
        return complete(url, model, prompts[i], tokens, extra)

    with concurrent.futures.ThreadPoolExecutor(len(MIXED_KS)) as pool:
        runs = list(pool.map(one, range(len(MIXED_KS))))
    tpots = [c.tpot_s for c in runs if c.tpot_s is not None]
    return {
        "verify_tokens": verify_tokens(url) - counted,
        "tpot_ms": statistics.mean(tpots) * 1e3,
        "cpu_ms_per_token": (cpu_seconds(url) - cpu) / (len(runs) * tokens) * 1e3,
    }


def layout_summary(rows: list[dict]) -> list[dict]:
    out = []
    for drafter in dict.fromkeys(r["drafter"] for r in rows):
        rounds = {r["round"] for r in rows if r["drafter"] == drafter}
        pairs = [
            (
                next(r for r in rows if (r["drafter"], r["layout"], r["round"]) == (drafter, "ragged", k)),
                next(r for r in rows if (r["drafter"], r["layout"], r["round"]) == (drafter, "rectangular", k)),
            )
            for k in sorted(rounds)
        ]
        saved = [1 - a["verify_tokens"] / b["verify_tokens"] for a, b in pairs]
        tpot = [a["tpot_ms"] / b["tpot_ms"] for a, b in pairs]
        out.append(
            {
                "drafter": drafter,
                "ragged_verify_tokens": statistics.median(a["verify_tokens"] for a, _ in pairs),
                "rectangular_verify_tokens": statistics.median(b["verify_tokens"] for _, b in pairs),
                "verify_tokens_saved": statistics.median(saved),
                "tpot_ratio_median": statistics.median(tpot),
                "tpot_ratio_min": min(tpot),
                "tpot_ratio_max": max(tpot),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="Mixtral checkpoint (default: deciding_setup()'s, not inflated)")
    parser.add_argument("--draft", type=Path, default=None, help="STANDALONE draft model (default: the model's own)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per cell (ratios per round)")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 2, 2 rounds, short outputs")
    parser.add_argument(
        "--burst-off",
        action="store_true",
        help="a fifth engine in the K = 0 rounds: NGRAM with plain_burst = 1 (one token per step, the K = 0 path "
        "before plain bursts)",
    )
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "spec_overhead")
    model = resolve_model(args.model)
    args.draft = args.draft or DENSE_DRAFTS.get(model.name, DEFAULT_DRAFT_MODEL)
    tokens, repeats = (8, 2) if args.quick else (args.tokens, args.repeats)
    batches = (2,) if args.quick else (1, 8)
    prompts = as_token_ids(prompt_sets(16, 160 if args.quick else 400), model, 96)["mixed"]
    threads = args.engine_threads
    specs = {"ngram": speculation("ngram", args.draft), "standalone": speculation("standalone", args.draft)}
    # at most four engines at once: each holds ~3 GB (SGLang's processes) of the machine's 24; the speculative
    # engines of the K = 0 rows are the ragged ones of the layout rows (an engine start is ~45 s of a quick run)
    sync = engine(model, SpeculationConfig("none"), "ragged", threads, ("--disable-overlap-schedule",))
    plain = {"plain": engine(model, SpeculationConfig("none"), "ragged", threads), "plain-sync": sync}
    if args.burst_off:
        plain["ngram-burst-off"] = engine(model, specs["ngram"], "ragged", threads, burst=1)
    with _engines(folder, {name: engine(model, spec, "ragged", threads) for name, spec in specs.items()}) as ragged:
        with _engines(folder, plain) as urls:
            rows = k0_rows(urls | ragged, prompts, tokens, batches, repeats)
        layouts = []
        for drafter, spec in specs.items():
            rectangular = {"rectangular": engine(model, spec, "rectangular", threads)}
            with _engines(folder, rectangular, prefix=f"{drafter}-") as urls:
                layouts += layout_rows({"ragged": ragged[drafter], **urls}, drafter, prompts, tokens, repeats)
    summary, saved = ratio_summary(rows), layout_summary(layouts)
    print(table(summary, ["variant", "batch", "metric", "median_ratio", "min_ratio", "max_ratio", "rounds"]))
    print(table(saved, list(saved[0])))
    payload = {
        "model": str(model),
        "draft": str(args.draft),
        "cpu": cpu_info(),
        "engine_threads": args.engine_threads,
        "tokens": tokens,
        "batches": list(batches),
        "plain_burst": EngineSettings().plain_burst,
        "k0_rows": rows,
        "k0_summary": summary,
        "layout_rows": layouts,
        "layout_summary": saved,
    }
    print(f"wrote {write_json(folder, 'spec_overhead', payload)}")
    return 0


@contextlib.contextmanager
def _engines(folder: Path, configs: dict[str, EngineConfig], prefix: str = ""):
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(running_engine(config, log_path=folder / f"engine-{prefix}{name}.log"))
            for name, config in configs.items()
        }


if __name__ == "__main__":
    raise SystemExit(main())
