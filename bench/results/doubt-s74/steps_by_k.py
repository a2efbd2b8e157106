"""Scratch (74th session): a step log's batch-1 speculative steps by task, K, whether every draft was accepted and
the plain steps just before (capped at 3), with their median draft, verify, other and wall ms; and each task's median
plain step (wall). usage: PYTHONPATH=.:../amx-b8-s73:../zen5-b8-s72 python steps_by_k.py STEPS.jsonl.gz"""

import collections
import statistics
import sys

from _tasks import batch1_by_task  # ../amx-b8-s73's helper

reqs, task_of = batch1_by_task(sys.argv[1])
spec, plain = collections.defaultdict(list), collections.defaultdict(list)
for rid, st in reqs.items():
    if len(st) < 8:
        continue
    before = 0
    for s in st:
        wall = (s["end"] - s["start"]) * 1e3
        if s["plain"]:
            plain[task_of[rid]].append(wall)
            before += 1
            continue
        whole = s["accepted"][0] == s["k"][0]
        spec[(task_of[rid], s["k"][0], whole, min(before, 3))].append(
            (s["draft_ms"], s["verify_ms"], s["other_ms"], wall)
        )
        before = 0
print("task: median plain step wall ms (rows; a burst's forwards are rows of their own)")
for task, walls in sorted(plain.items()):
    print(f"  {task}: {statistics.median(walls):.1f} ({len(walls)})")
print("task K whole plain-before: steps, draft, verify, other, wall ms (medians)")
for key, v in sorted(spec.items()):
    print(" ", *key, len(v), " ".join(f"{statistics.median(x[i] for x in v):.1f}" for i in range(4)))
