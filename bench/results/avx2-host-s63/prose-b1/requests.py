"""Scratch (63rd session): the batch-1 requests of a step log (moe_sglang/step_log.py) in order, each with its steps'
K and drafts accepted, and the price log's records of moe-serve's requests (bench/results/gate-reuse-s50's
sitecustomize: first-judgement gates, rejudgement answers, decisions with the request's acceptance p and J per K).
usage: python bench/results/avx2-host-s63/prose-b1/requests.py STEPS.jsonl.gz PRICES.jsonl.gz"""

import collections
import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") as f:
    steps = [json.loads(line) for line in f]
requests: dict[str, list[dict]] = collections.OrderedDict()
for step in steps:
    if len(step["rids"]) == 1:
        requests.setdefault(step["rids"][0], []).append(step)
print("request steps K per step / drafts accepted per step")
for rid, run in requests.items():
    ks = "".join(str(s["k"][0]) for s in run)
    print(rid[:6], len(run), ks, ",".join(str(s["accepted"][0]) for s in run))
print("\nprice log (moe-serve's batch-1 requests)")
with gzip.open(sys.argv[2], "rt") as f:
    for line in f:
        record = json.loads(line)
        record.pop("t", None)
        if record.get("bs", 1) == 1:
            print(json.dumps(record))
