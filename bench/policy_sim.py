"""Speculation policies on the step-level MoE simulator: TPOT relative to no speculation, per task and policy.

    python bench/policy_sim.py [--quick] [--out DIR]

Prints one table per batch size (1 = Cascade's single-batch setting, 8 = a moderate batch), writes
DIR/policy_sim.json and DIR/policy_sim.png, and checks the qualitative results of issue 4 at batch size 1:
static K slows the low-acceptance (math-like) task by >= 25 %, cascade stays within 5 %, and moe-serve is at least
as good as cascade on the mixed task (checked at every batch size). Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.policy.sim_matrix import MatrixConfig, relative_tpot  # noqa: E402

LOW_ACCEPTANCE = "math-like"


def check(results: dict[int, dict[str, dict[str, float]]]) -> list[tuple[str, bool]]:
    """The issue's qualitative claims, each with whether the results show it."""
    claims = []
    single = results.get(1)
    if single is not None and LOW_ACCEPTANCE in single:
        row = single[LOW_ACCEPTANCE]
        worst_static = max(v for k, v in row.items() if k.startswith("static-"))
        claims.append(
            (f"batch 1: static K slows {LOW_ACCEPTANCE} by >= 25 % ({worst_static - 1:+.1%})", worst_static >= 1.25)
        )
        claims.append(
            (f"batch 1: cascade within 5 % on {LOW_ACCEPTANCE} ({row['cascade'] - 1:+.1%})", row["cascade"] <= 1.05)
        )
    for batch, tasks in sorted(results.items()):
        if "mixed" in tasks:
            row = tasks["mixed"]
            claims.append(
                (
                    f"batch {batch}: moe-serve ({row['moe-serve']:.3f}) <= cascade ({row['cascade']:.3f}) TPOT on mixed",
                    row["moe-serve"] <= row["cascade"],
                )
            )
    return claims


def table(batch: int, tasks: dict[str, dict[str, float]]) -> str:
    policies = list(next(iter(tasks.values())))
    width = max(len(p) for p in policies) + 2
    lines = [
        f"batch size {batch}: TPOT relative to no speculation (lower is better)",
        "policy".ljust(width) + "".join(t.rjust(12) for t in tasks),
    ]
    for p in policies:
        lines.append(p.ljust(width) + "".join(f"{tasks[t][p]:12.3f}" for t in tasks))
    return "\n".join(lines)


def plot(results: dict[int, dict[str, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(7 * len(results), 4.5), squeeze=False)
    for ax, (batch, tasks) in zip(axes[0], sorted(results.items()), strict=True):
        names = list(tasks)
        policies = list(next(iter(tasks.values())))
        width = 0.8 / len(policies)
        for i, p in enumerate(policies):
            ax.bar([x + i * width for x in range(len(names))], [tasks[t][p] for t in names], width, label=p)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(names))], names)
        ax.set_ylabel("TPOT / TPOT without speculation")
        ax.set_title(f"batch size {batch}")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and one seed (a few seconds)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="directory for JSON and PNG")
    args = parser.parse_args(argv)
    config = MatrixConfig(requests_per_slot=2, seeds=(0,)) if args.quick else MatrixConfig(seeds=(0, 1, 2))
    results = relative_tpot(config)
    for batch, tasks in sorted(results.items()):
        print(table(batch, tasks), end="\n\n")
    claims = check(results)
    for text, ok in claims:
        print(("PASS " if ok else "FAIL ") + text)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": {
            "batch_sizes": config.batch_sizes,
            "requests_per_slot": config.requests_per_slot,
            "output_tokens": config.output_tokens,
            "seeds": config.seeds,
        },
        "relative_tpot": {str(b): t for b, t in results.items()},
        "claims": [{"claim": text, "holds": ok} for text, ok in claims],
    }
    (args.out / "policy_sim.json").write_text(json.dumps(payload, indent=2))
    try:
        plot(results, args.out / "policy_sim.png")
    except ImportError:
        print("matplotlib not installed: no PNG written", file=sys.stderr)
    print(f"wrote {args.out / 'policy_sim.json'}")
    return 0 if all(ok for _, ok in claims) else 1


if __name__ == "__main__":
    sys.exit(main())
