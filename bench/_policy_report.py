"""The deciding benchmark's report (bench/policies.py): which differences between policies exceed the spread of
the rounds, worst-case slowdown and mean gain per policy, issue 16's goals, and the TPOT picture."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from bench._common import figure, save_figure

BASELINE = "none"
# no speculation on the plain engine with SGLang's overlap scheduler off: scheduled as the speculative engines are
# (moe_sglang/algorithm.py), so its TPOT is timed the same way (bench/policies.py's docstring)
SYNC_BASELINE = "none-sync"
GOALS = {"worst_slowdown": 1.02, "gain_vs_best_static": 0.15, "gain_vs_sglang_adaptive": 0.10, "code_speedup": 1.6}
GOAL_POLICIES = (BASELINE, "sglang-adaptive", "cascade")  # besides the policy judged and at least one static K


def separated(rows: list[dict], metric: str = "tpot_ms") -> list[dict]:
    """Per cell, the pairs of policies whose min-max ranges of `metric` do not overlap: (faster, slower, ratio of
    medians). Everything else is within the run's spread."""
    out = []
    for cell, mine in _cells(rows).items():
        pairs = []
        for a, b in itertools.permutations(mine, 2):
            if a[f"{metric}_max"] < b[f"{metric}_min"]:
                pairs.append({"faster": a["policy"], "slower": b["policy"], "ratio": b[metric] / a[metric]})
        out.append({**dict(zip(("drafter", "prompts", "batch"), cell, strict=True)), "pairs": pairs})
    return out


def _cells(rows: list[dict]) -> dict[tuple, list[dict]]:
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["drafter"], r["prompts"], r["batch"]), []).append(r)
    return cells


def summarize(rows: list[dict], baseline: str = BASELINE, metric: str = "tpot_ms") -> list[dict]:
    """Per policy: worst-case slowdown (max ratio of medians vs the cell's baseline) and mean gain (geometric mean
    of baseline / policy over cells, minus 1), over all cells and per drafter."""
    out = []
    for drafter in (None, *dict.fromkeys(r["drafter"] for r in rows)):
        mine = [r for r in rows if drafter is None or r["drafter"] == drafter]
        base = {k: next(r[metric] for r in v if r["policy"] == baseline) for k, v in _cells(mine).items()}
        for policy in dict.fromkeys(r["policy"] for r in mine):
            ratios = [r[metric] / base[(r["drafter"], r["prompts"], r["batch"])] for r in mine if r["policy"] == policy]
            out.append(
                {
                    "drafter": drafter or "all",
                    "policy": policy,
                    "baseline": baseline,
                    "metric": metric,
                    "cells": len(ratios),
                    "worst_slowdown": max(ratios),
                    "mean_gain": _geomean([1 / x for x in ratios]) - 1.0,
                }
            )
    return out


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def goals(rows: list[dict], policy: str = "moe-serve", baseline: str = BASELINE) -> list[dict]:
    """Issue 16's goals, computed from the rows (ratios of cell medians within this run) against `baseline` (no
    speculation: the plain engine, or SYNC_BASELINE); none when a run left out a policy they compare against
    (`--policies`)."""
    present = {r["policy"] for r in rows}
    if not {*GOAL_POLICIES, baseline, policy} <= present or not any(p.startswith("static-") for p in present):
        return []
    none = baseline
    suffix = "" if baseline == BASELINE else f" ({baseline})"
    cells = _cells(rows)

    def med(cell, name):
        return next(r for r in cells[cell] if r["policy"] == name)

    def gain_over(other: str) -> float:  # geometric mean over cells of other / policy TPOT, minus 1
        return _geomean([med(c, other)["tpot_ms"] / med(c, policy)["tpot_ms"] for c in cells]) - 1.0

    statics = [name for name in dict.fromkeys(r["policy"] for r in rows) if name.startswith("static-")]
    best_static = max(statics, key=lambda s: _geomean([med(c, none)["tpot_ms"] / med(c, s)["tpot_ms"] for c in cells]))
    worst = max(cells, key=lambda c: med(c, policy)["tpot_ms"] / med(c, none)["tpot_ms"])
    worst_ratio = med(worst, policy)["tpot_ms"] / med(worst, none)["tpot_ms"]
    behind = [c for c in cells if med(c, policy)["tpot_ms_min"] > med(c, "cascade")["tpot_ms_max"]]
    code = [c for c in cells if c[1] == "code"]
    best_code = max(code, key=lambda c: med(c, none)["tpot_ms"] / med(c, policy)["tpot_ms"]) if code else None
    code_speedup = med(best_code, none)["tpot_ms"] / med(best_code, policy)["tpot_ms"] if code else None
    label = "/".join(map(str, worst))
    rows_out = [
        _goal(
            f"worst-case TPOT slowdown vs none{suffix}",
            worst_ratio,
            f"<= {GOALS['worst_slowdown']}",
            worst_ratio <= GOALS["worst_slowdown"],
            f"worst cell {label}",
        ),
        _goal(
            f"mean TPOT gain vs best static K ({best_static}){suffix}",
            gain_over(best_static),
            f">= +{GOALS['gain_vs_best_static']:.0%}",
            gain_over(best_static) >= GOALS["gain_vs_best_static"],
            f"best static K = the one K with the best mean gain over {none}",
        ),
        _goal(
            f"mean TPOT gain vs sglang-adaptive{suffix}",
            gain_over("sglang-adaptive"),
            f">= +{GOALS['gain_vs_sglang_adaptive']:.0%}",
            gain_over("sglang-adaptive") >= GOALS["gain_vs_sglang_adaptive"],
            "",
        ),
        _goal(
            f"cells behind cascade beyond the spread{suffix}",
            float(len(behind)),
            "0",
            not behind,
            ", ".join("/".join(map(str, c)) for c in behind) or "none",
        ),
        _goal(
            f"best code speedup vs none{suffix}",
            code_speedup,
            f">= {GOALS['code_speedup']}",
            code_speedup is not None and code_speedup >= GOALS["code_speedup"],
            "/".join(map(str, best_code)) if best_code else "no code cell",
        ),
    ]
    if baseline != BASELINE:  # the comparisons between policies do not depend on the baseline
        rows_out = [g for g in rows_out if "sglang-adaptive" not in g["goal"] and "cascade" not in g["goal"]]
    return rows_out


def _goal(goal: str, value, target: str, met: bool, detail: str) -> dict:
    return {"goal": goal, "value": value, "target": target, "met": met, "detail": detail}


def spread_report(seps: list[dict], policy: str = "moe-serve") -> list[dict]:
    """Per cell, what `policy` beats and what beats it beyond the spread, and how many pairs are separated."""
    out = []
    for s in seps:
        out.append(
            {
                "drafter": s["drafter"],
                "prompts": s["prompts"],
                "batch": s["batch"],
                "separated_pairs": len(s["pairs"]),
                f"{policy}_beats": ", ".join(p["slower"] for p in s["pairs"] if p["faster"] == policy) or "-",
                f"beats_{policy}": ", ".join(p["faster"] for p in s["pairs"] if p["slower"] == policy) or "-",
            }
        )
    return out


def plot(rows: list[dict], path: Path) -> None:
    drafters = list(dict.fromkeys(r["drafter"] for r in rows))
    batches = list(dict.fromkeys(r["batch"] for r in rows))
    panels = list(itertools.product(drafters, batches))
    fig, axes = figure(len(panels), (5 * len(panels), 3.8))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    width = 0.8 / len(policies)
    for ax, (drafter, batch) in zip(axes, panels, strict=True):
        sets = list(dict.fromkeys(r["prompts"] for r in rows if r["drafter"] == drafter))
        for i, policy in enumerate(policies):
            mine = [
                next(
                    (
                        r
                        for r in rows
                        if (r["drafter"], r["policy"], r["prompts"], r["batch"]) == (drafter, policy, s, batch)
                    ),
                    None,
                )
                for s in sets
            ]
            med = [r["tpot_ms"] if r else 0 for r in mine]
            err = [
                [r["tpot_ms"] - r["tpot_ms_min"] if r else 0 for r in mine],
                [r["tpot_ms_max"] - r["tpot_ms"] if r else 0 for r in mine],
            ]
            ax.bar([j + i * width for j in range(len(sets))], med, width=width, yerr=err, label=policy, capsize=1)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sets))], sets)
        ax.set_ylabel("TPOT (ms), median and min-max")
        ax.set_title(f"{drafter}, batch {batch}")
    axes[-1].legend(fontsize=6, ncol=2)
    save_figure(fig, path, "TPOT by speculation policy (lower is better)")
