"""Scratch (73rd session): per task (as _tasks.py tells them apart), the batch-1 requests of a step log by kind,
`SA` (moe-serve's: judged or speculated) and `K0` (the k0 floor's), with their medians of: wall from the first
step's start to the last step's end, scheduler steps, gaps between them, plain forwards' ms and count, the
speculative steps' wall ms, judgements (waited / beside), the steps' other ms.
usage: PYTHONPATH=.:../zen5-b8-s72 python parts_b1.py STEPS.jsonl.gz"""

import collections
import statistics
import sys

from _tasks import batch1_by_task  # this folder's helper

reqs, task_of = batch1_by_task(sys.argv[1])
groups = collections.defaultdict(list)
for rid, st in reqs.items():
    if len(st) < 8:
        continue  # a warm-up or a tail
    kind = "SA" if any(s["judge_ms"] or not s["plain"] for s in st) else "K0"
    # a burst's forwards share one scheduler step: consecutive steps with no gap between them
    sched = 1 + sum(1 for a, b in zip(st, st[1:], strict=False) if b["start"] - a["end"] > 1e-4)
    plain = [s for s in st if s["plain"]]
    groups[(task_of[rid], kind)].append(
        {
            "wall": (st[-1]["end"] - st[0]["start"]) * 1e3,
            "sched": sched,
            "gaps": sum(max(b["start"] - a["end"], 0.0) for a, b in zip(st, st[1:], strict=False)) * 1e3,
            "plain_fwd": sum(s["verify_ms"] for s in plain),
            "plain_n": len(plain),
            "spec_wall": sum((s["end"] - s["start"]) * 1e3 for s in st if not s["plain"]),
            "judge": sum(s["judge_ms"] for s in st),
            "beside": sum(s["judge_beside_ms"] for s in st),
            "other": sum(s["other_ms"] for s in st),
        }
    )
for key in sorted(groups):
    g = groups[key]
    med = {f: statistics.median(x[f] for x in g) for f in g[0]}
    print(f"{key[0]:6} {key[1]} n={len(g):2} " + " ".join(f"{f}={v:.1f}" for f, v in med.items()))
