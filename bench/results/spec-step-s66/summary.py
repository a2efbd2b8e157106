"""Scratch (66th session): the A/B runs of ab_spec.py side by side: per engine the batch-1 speculative steps' medians of
other_ms and draft_ms, each also over the same engine's verify_ms (engines of identical code read verify forwards
12.6-20.0 ms from one start to the next on this host, so the absolute numbers move with the start), and TPOT.
Usage: python summary.py ab-*.json > summary.txt"""

import json
import statistics
import sys


def main(paths: list[str]) -> None:
    cols = ("tpot_ms", "verify_ms", "other_ms", "draft_ms")
    print(
        f"{'run':<18} {'variant':<7} {'round':>5} " + " ".join(f"{c:>9}" for c in cols) + "  other/verify draft/verify"
    )
    per = {"old": [], "new": []}
    for path in paths:
        with open(path) as f:
            rows = json.load(f)
        for r in rows:
            o, d = r["other_ms"] / r["verify_ms"], r["draft_ms"] / r["verify_ms"]
            per[r["variant"]].append((r, o, d))
            vals = " ".join(f"{r[c]:>9.2f}" for c in cols)
            print(f"{path:<18} {r['variant']:<7} {r['round']:>5} {vals}  {o:12.3f} {d:11.3f}")
    for variant, rows in per.items():
        med = {c: statistics.median(r[c] for r, _, _ in rows) for c in cols}
        o = statistics.median(x for _, x, _ in rows)
        d = statistics.median(x for _, _, x in rows)
        print(f"{variant} medians over {len(rows)} engines: " + ", ".join(f"{c} {v:.2f}" for c, v in med.items()))
        print(
            f"{variant} other/verify {o:.3f} [{min(x for _, x, _ in rows):.3f}, {max(x for _, x, _ in rows):.3f}]"
            f", draft/verify {d:.3f} [{min(x for _, _, x in rows):.3f}, {max(x for _, _, x in rows):.3f}]"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
