"""Scratch (73rd session): what this folder's README cites from run2-decide's logs. (1) The batch-1 decisions of
K = 1 (decide.jsonl.gz): how many, K = 1's and K = 0's predicted step ms, the first and second drafts' p, and how much
lower J at K = 1 was than at K = 0. (2) Each batch-1 request's judged and speculative steps (steps.jsonl.gz): wall
ms, K, drafts accepted, judgements' outcomes, for the requests named. (3) The batch-8 plain waves of moe-serve: their
steps with other ms over 1 (the rejudging steps).
usage: PYTHONPATH=.:../zen5-b8-s72 python decisions_b1.py RUN_DIR [REQUEST_ID_PREFIX ...]"""

import gzip
import json
import statistics
import sys
from pathlib import Path

from _waves import rows, waves

run = Path(sys.argv[1])
decisions = []
if (run / "decide.jsonl.gz").exists():  # a moe-serve-log run's
    with gzip.open(run / "decide.jsonl.gz", "rt") as f:
        decisions = [json.loads(line) for line in f]
k1 = [d for d in decisions if d["k"] == 1]
if k1:
    t1 = [d["t_j"][1][1] for d in k1]
    t0 = [d["t_j"][0][1] for d in k1]
    p0, p1 = [d["p"][0] for d in k1], [d["p"][1] for d in k1]
    fall = [1 - d["t_j"][1][2] / d["t_j"][0][2] for d in k1]
    print(
        f"(1) {len(k1)} K = 1 decisions of {len(decisions)}: K = 1 priced {min(t1)}-{max(t1)} ms, K = 0 {min(t0)}-{max(t0)};"
    )
    print(f"    p first {min(p0)}-{max(p0)} (median {statistics.median(p0):.3f}), second {min(p1)}-{max(p1)};")
    print(
        f"    J at K = 1 under K = 0's by a median {statistics.median(fall):.3f} ({min(fall):.3f} to {max(fall):.3f})"
    )
steps = rows(str(run / "steps.jsonl.gz"))
for prefix in sys.argv[2:]:
    mine = [s for s in steps if len(s["rids"]) == 1 and s["rids"][0].startswith(prefix)]
    shown = [
        (round((s["end"] - s["start"]) * 1e3, 1), s["k"][0], s["accepted"][0], s["shadow"])
        for s in mine
        if not s["plain"] or s["shadow"]
    ]
    print(f"(2) {prefix}: (wall ms, K, accepted, judged) {shown}")
for wave in waves(steps):
    if (
        max(len(s["rids"]) for s in wave) == 8
        and all(s["plain"] for s in wave)
        and any(s["judge_beside_ms"] for s in wave)
    ):
        print(
            "(3) a judged plain batch-8 wave, steps with other > 1 ms:",
            [(i, round(s["other_ms"], 1)) for i, s in enumerate(wave) if s["other_ms"] > 1.0],
        )
