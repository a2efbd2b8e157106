"""Scratch (74th session): a bench.policies step log's batch-1 requests by task (../amx-b8-s73/_tasks.py) and by the
policy that decided them ($RID_LOG of sitecustomize.py): per group, requests, the median request's wall (first step's
start to last step's end) and its min-max, and over all its requests the speculative steps (by K), the tokens they
emitted, their wall, and how many had their first draft rejected.
usage: PYTHONPATH=.:../amx-b8-s73:../zen5-b8-s72 python rids.py STEPS.jsonl.gz RIDS.jsonl.gz"""

import collections
import gzip
import json
import statistics
import sys

from _tasks import batch1_by_task  # ../amx-b8-s73's helper

reqs, task_of = batch1_by_task(sys.argv[1])
with gzip.open(sys.argv[2], "rt") as f:
    policy_of = {r["rid"]: r["policy"] for r in map(json.loads, f)}
groups = collections.defaultdict(list)
for rid, st in reqs.items():
    if len(st) < 8 or rid not in policy_of:
        continue  # a warm-up or a tail, or a request no logged policy decided
    spec = [s for s in st if not s["plain"]]
    groups[(task_of[rid], policy_of[rid])].append(
        {
            "wall": (st[-1]["end"] - st[0]["start"]) * 1e3,
            "ks": collections.Counter(s["k"][0] for s in spec),
            "tokens": sum(s["accepted"][0] + 1 for s in spec),
            "spec_ms": sum((s["end"] - s["start"]) * 1e3 for s in spec),
            "first_rejected": sum(1 for s in spec if s["accepted"][0] == 0),
        }
    )
print("task policy: requests, wall ms median [min, max]; speculative steps by K, tokens, wall ms, first draft rejected")
for (task, policy), g in sorted(groups.items()):
    walls = [x["wall"] for x in g]
    ks = sum((x["ks"] for x in g), collections.Counter())
    print(
        f"{task} {policy}: {len(g)}, {statistics.median(walls):.1f} [{min(walls):.1f}, {max(walls):.1f}]; "
        f"{dict(sorted(ks.items()))}, {sum(x['tokens'] for x in g)} tokens, {sum(x['spec_ms'] for x in g):.0f} ms, "
        f"{sum(x['first_rejected'] for x in g)} rejected"
    )
