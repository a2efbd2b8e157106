"""Scratch (61st session): from a price log (PREFIX-prices.jsonl.gz), each batch-1 request's first-judgement gates
(cost, hoped gain, hope per position, passed), its speculative steps, the highest own acceptance at any draft position, the largest one-step fall of its own
acceptance at any draft position while it was asked; then the batch-8 gates. usage: python gates.py PREFIX"""

import collections
import gzip
import itertools
import json
import sys

gates, decisions, wide = collections.defaultdict(list), collections.defaultdict(list), []
with gzip.open(f"{sys.argv[1]}-prices.jsonl.gz", "rt") as f:
    for line in f:
        r = json.loads(line)
        if r["ev"] == "judge_gate":
            row = (round(r["cost_ms"], 1), round(r["gain_ms"], 1), [round(h, 2) for h in r["hope"]])
            (gates[r["group"][0]] if r["bs"] == 1 else wide).append(row)
        elif r["ev"] == "decide" and r["bs"] == 1:
            decisions[r["rid"][:6]].append((r["ks"][0], r["p"][:4]))
for rid, rows in gates.items():
    steps = decisions.get(rid, [])
    falls = [max(a - b for a, b in zip(p, q, strict=True)) for (_, p), (_, q) in itertools.pairwise(steps)]
    passed = any(cost <= gain for cost, gain, _ in rows)
    print(f"{rid} {'passed' if passed else 'declined'} gates (cost ms, gain ms, hope): {rows}")
    top = max((max(p) for _, p in steps), default=0)
    print(
        f"   speculative steps {sum(k > 0 for k, _ in steps)}, highest p {top:.2f}, largest one-step fall {max(falls, default=0):.2f}"
    )
print("batch-8 gates (cost ms, gain ms, hope):")
for cost, gain, hope in wide:
    print(f"   {cost} {gain} {hope} {'passed' if cost <= gain else 'declined'}")
