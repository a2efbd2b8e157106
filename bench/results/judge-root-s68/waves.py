"""Scratch (69th session): each batch-8 wave of a step log (run.py's STEP_LOG) in time order: its steps, speculative
steps, wall ms from its first step's start to its last step's end, and the steps' time split summed (the target's
forwards `verify`, `draft`, `judge` on the step's path, `beside` the judgements run beside it, `other` the rest of
the steps, `gaps` the time between the steps: the scheduler outside them), with the outcomes judged; with --steps,
then each of its steps whose `other` exceeds 0.3 ms or that judged: (step, other ms, beside ms, outcomes judged).
usage: python waves.py STEPS.jsonl.gz [--steps]"""

import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") as f:
    rows = [json.loads(line) for line in f]
waves: list[dict] = []
for r in rows:
    ids = set(r["rids"])
    if not waves or not ids & waves[-1]["ids"]:
        waves.append({"ids": set(), "rows": []})
    waves[-1]["ids"] |= ids
    waves[-1]["rows"].append(r)
for w in waves:
    rs = w["rows"]
    if max(len(r["rids"]) for r in rs) < 8:
        continue
    wall = (rs[-1]["end"] - rs[0]["start"]) * 1e3
    inside = sum((r["end"] - r["start"]) * 1e3 for r in rs)
    parts = " ".join(
        f"{name}={sum(r[key] for r in rs):5.0f}"
        for name, key in (
            ("verify", "verify_ms"),
            ("draft", "draft_ms"),
            ("judge", "judge_ms"),
            ("beside", "judge_beside_ms"),
            ("other", "other_ms"),
        )
    )
    spec = sum(not r["plain"] for r in rs)
    judged = sum(len(r["shadow"]) for r in rs)
    print(f"steps={len(rs)} spec={spec} wall={wall:6.0f} {parts} gaps={wall - inside:4.0f} judged={judged}")
    if "--steps" in sys.argv:
        marked = [
            (i, round(r["other_ms"], 1), round(r["judge_beside_ms"], 1), len(r["shadow"]))
            for i, r in enumerate(rs)
            if r["other_ms"] > 0.3 or r["shadow"]
        ]
        print("    ", marked)
