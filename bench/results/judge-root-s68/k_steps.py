"""Scratch (69th session): the batch-1 steps of a step log by K and outcome (all drafts accepted, some, none): their
median wall time, target forward and draft ms; with a decide log (the moe-serve-log variant's $DECIDE_LOG), the
steps whose drafts were all accepted by the expert reuse the policy held for their request when it last decided
(static-K requests: 'static'), with their target forward plus draft ms.
usage: python k_steps.py STEPS.jsonl.gz [DECIDE.jsonl.gz]"""

import collections
import gzip
import json
import statistics
import sys

with gzip.open(sys.argv[1], "rt") as f:
    rows = [json.loads(line) for line in f if len(json.loads(line)["rids"]) == 1]
by = collections.defaultdict(list)
for r in rows:
    k, a = r["k"][0], r["accepted"][0]
    outcome = "all" if a == k else "none" if a == 0 else "some"
    by[(k, outcome)].append(((r["end"] - r["start"]) * 1e3, r["verify_ms"], r["draft_ms"]))
for key in sorted(by):
    v = by[key]
    med = [statistics.median(x[j] for x in v) for j in range(3)]
    print(f"K={key[0]} {key[1]:4s} steps {len(v):3d}  total {med[0]:5.1f}  forward {med[1]:5.1f}  draft {med[2]:4.1f}")
if len(sys.argv) > 2:
    with gzip.open(sys.argv[2], "rt") as f:
        reuse = {d["rid"]: d["reuse"][0] for d in map(json.loads, f) if d.get("reuse")}
    held = collections.defaultdict(list)
    for r in rows:
        k, a = r["k"][0], r["accepted"][0]
        if k > 0 and a == k:
            held[(str(reuse.get(r["rids"][0][:6], "static")), k)].append(r["verify_ms"] + r["draft_ms"])
    for key in sorted(held):
        print(
            f"reuse {key[0]:>20s} K={key[1]} steps {len(held[key]):3d}  median {statistics.median(held[key]):5.1f} ms"
        )
