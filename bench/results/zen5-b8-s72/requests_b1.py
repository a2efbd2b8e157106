"""Scratch (72nd session): each batch-1 request of a step log in time order, as `SA` (it judged, was judged or
speculated: moe-serve's) or `K0` (every step plain and unjudged: the k0 floor's, or a moe-serve request never
judged), with its forwards, scheduler steps and time split (ms): wall from its first step's start to its last
step's end, `gaps` between its steps (the scheduler outside them), the target's forwards, drafting, judgements
beside the forwards, the steps' `other`; then the medians per group.
usage: python requests_b1.py STEPS.jsonl.gz"""

import statistics
import sys

from _waves import rows  # this folder's helper

reqs: dict[str, list[dict]] = {}
for r in rows(sys.argv[1]):
    if len(r["rids"]) == 1:
        reqs.setdefault(r["rids"][0], []).append(r)
groups: dict[str, list[dict]] = {"SA": [], "K0": []}
for rid, steps in reqs.items():
    judged = any(s["judge_ms"] > 0 or s["judge_beside_ms"] > 0 or s["k"][0] > 0 for s in steps)
    wall = (steps[-1]["end"] - steps[0]["start"]) * 1e3
    inside = sum((s["end"] - s["start"]) * 1e3 for s in steps)
    row = {
        "forwards": len(steps),
        "sched_steps": 1 + sum(1 for a, b in zip(steps, steps[1:], strict=False) if b["start"] - a["end"] > 5e-4),
        "spec": sum(1 for s in steps if s["k"][0] > 0),
        "wall": wall,
        "gaps": wall - inside,
        "verify": sum(s["verify_ms"] for s in steps),
        "draft": sum(s["draft_ms"] for s in steps),
        "beside": sum(s["judge_beside_ms"] for s in steps),
        "other": sum(s["other_ms"] for s in steps),
    }
    group = "SA" if judged else "K0"
    groups[group].append(row)
    print(group, rid[:6], " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
for group, got in groups.items():
    for label, chosen in (("all", got), ("never speculated", [x for x in got if x["spec"] == 0])):
        if chosen:
            medians = " ".join(f"{k}={statistics.median(x[k] for x in chosen):.1f}" for k in chosen[0])
            print(f"{group} {label}: {len(chosen)} requests, medians {medians}")
