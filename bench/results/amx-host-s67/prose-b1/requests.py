"""Scratch (67th session): every batch-1 request of a step log (moe_sglang/step_log.py) in order, its K and drafts
accepted per step and the summed step time, marked MS where the price log (bench/results/gate-reuse-s50's logger)
names it, i.e. a moe-serve request. usage: python requests.py STEPS.jsonl.gz PRICES.jsonl.gz"""

import collections
import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") as f:
    steps = [json.loads(line) for line in f]
with gzip.open(sys.argv[2], "rt") as f:
    prices = [json.loads(line) for line in f]
ours = {p["rid"] for p in prices if "rid" in p} | {g for p in prices for g in p.get("group", [])}
requests: dict[str, list[dict]] = collections.OrderedDict()
for step in steps:
    if len(step["rids"]) == 1:
        requests.setdefault(step["rids"][0], []).append(step)
print("policy request steps K-per-step accepted-per-step step-ms")
for rid, run in requests.items():
    tag = "MS" if rid[:6] in ours else "--"
    ks = "".join(str(s["k"][0]) for s in run)
    accepted = ",".join(str(s["accepted"][0]) for s in run)
    took = sum(s["end"] - s["start"] for s in run) * 1e3
    print(tag, rid[:6], len(run), ks, accepted, f"{took:.0f}")
