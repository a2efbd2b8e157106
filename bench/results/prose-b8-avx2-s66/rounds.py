"""Scratch (66th session): the batch-8 cells of the four bench.policies runs per round (TPOT ms), moe-serve over none
per run (the runs' medians) and the drafter engine's batch-8 waves (waves.py of standalone-b8-s65).
Usage: python rounds.py > rounds.txt"""

import json
import statistics
import sys

sys.path.insert(0, "../standalone-b8-s65")
from waves import _lines, waves  # noqa: E402

RUNS = ("b8", "p8", "t8", "t8b")


def main() -> None:
    for run in RUNS:
        with open(f"policies-{run}.json") as f:
            rows = [r for r in json.load(f)["rows"] if r["batch"] == 8]
        cells = {(r["prompts"], r["policy"]): r for r in rows}
        for (prompts, policy), r in sorted(cells.items()):
            print(f"{run:<4} {prompts:<6} {policy:<10} rounds {[round(x, 1) for x in r['tpot_ms_rounds']]}")
        for prompts in sorted({p for p, _ in cells}):
            if (prompts, "moe-serve") in cells:
                ratio = cells[(prompts, "moe-serve")]["tpot_ms"] / cells[(prompts, "none")]["tpot_ms"]
                print(f"{run:<4} {prompts:<6} moe-serve / none {ratio:.3f}")
    for run in ("b8", "p8"):
        print(f"waves of steps-{run}.jsonl.gz (drafter engine, batch 8, time order)")
        for w in waves(_lines(f"steps-{run}.jsonl.gz")):
            mine = any(s["resting"] or s["shadow"] or not s["plain"] or s["judge_beside_ms"] for s in w)
            spec = [s for s in w if not s["plain"]]
            other = sum(s["other_ms"] for s in w if s["plain"])
            durations = ", ".join(f"{(s['end'] - s['start']) * 1e3:.0f}" for s in spec)
            print(
                f"  {'moe-serve' if mine else 'k0':<9} wall {(w[-1]['end'] - w[0]['start']) * 1e3:6.0f} ms"
                f"  spec steps {len(spec):>2} ({durations})"
                f"  plain forward median {statistics.median(s['verify_ms'] for s in w if s['plain']):5.1f}"
                f"  policy work on plain steps {other:5.1f} ms"
            )


if __name__ == "__main__":
    main()
