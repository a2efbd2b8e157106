"""Scratch (74th session): each policy's TPOT per round in one cell of a bench.policies JSON.
usage: python rounds.py POLICIES.json DRAFTER TASK BATCH  (here: policies/policies.json standalone prose 8)"""

import json
import sys

path, drafter, task, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with open(path) as f:
    rows = json.load(f)["rows"]
for r in rows:
    if (r["drafter"], r["prompts"], r["batch"]) == (drafter, task, batch):
        print(r["policy"], [round(x, 1) for x in r["tpot_ms_rounds"]])
