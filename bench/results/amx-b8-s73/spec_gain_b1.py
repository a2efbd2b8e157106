"""Scratch (73rd session): each speculative step of a batch-1 request in a step log against the plain forwards around
it: wall ms, tokens it emitted (1 + accepted) and what as many plain steps of that request would have taken (the
median plain step wall of the request), per task by the K chosen and by the step's place among the request's
speculative steps (tasks as _tasks.py tells them apart).
usage: PYTHONPATH=.:../zen5-b8-s72 python spec_gain_b1.py STEPS.jsonl.gz (that folder's _waves helper)"""

import collections
import statistics
import sys

from _tasks import batch1_by_task  # this folder's helper

reqs, task_of = batch1_by_task(sys.argv[1])
by_k = collections.defaultdict(list)
by_place = collections.defaultdict(list)
for rid, steps in reqs.items():
    plain = [(s["end"] - s["start"]) * 1e3 for s in steps if s["plain"] and not s["judge_ms"]]
    if not plain:
        continue
    unit = statistics.median(plain)
    spec = [s for s in steps if not s["plain"]]
    for place, s in enumerate(spec):
        wall = (s["end"] - s["start"]) * 1e3
        tokens = 1 + sum(s["accepted"])
        row = (wall, tokens, tokens * unit)
        by_k[(task_of[rid], s["k"][0])].append(row)
        by_place[(task_of[rid], min(place, 3))].append(row)
for name, table in (("K", by_k), ("place (3 = 4th and later)", by_place)):
    print(f"by {name}: steps, wall ms, tokens, plain ms for those tokens, gain ms (plain - wall)")
    for key in sorted(table):
        rows_ = table[key]
        wall = sum(r[0] for r in rows_)
        tokens = sum(r[1] for r in rows_)
        plain = sum(r[2] for r in rows_)
        print(
            f"  {key}: {len(rows_)} steps, {wall:.0f} ms, {tokens} tokens, {plain:.0f} ms plain, gain {plain - wall:+.0f}"
        )
