"""Scratch (62nd session; copied in the 63rd): the batch-8 waves of a step log (moe_sglang/step_log.py) of a `bench.policies --drafters
ngram --tasks code --policies moe-serve,static-2,sglang-adaptive --engine-threads 2 --no-peer` run on the NGRAM
engine (bench/results/prose-b1-s55/run_logged.py): per wave of 8 requests, its steps, plain forwards, wall time from
its first step to its last, the step log's time split, tokens accepted and the K chosen per request-step (a wave at
K = 2 only is static-2's, at K = 3-4 sglang-adaptive's, at K = 0 (and a few drafts) moe-serve's).
usage: python bench/results/amx-host-s62/codeb8/waves.py bench/results/amx-host-s62/codeb8/steps.jsonl.gz"""

import collections
import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") as f:
    steps = [json.loads(line) for line in f]
waves: list[dict] = []
for step in steps:
    rids = set(step["rids"])
    if len(rids) < 2:
        continue
    if not waves or not rids & waves[-1]["rids"]:
        waves.append({"rids": set(), "steps": []})
    waves[-1]["rids"] |= rids
    waves[-1]["steps"].append(step)
for i, wave in enumerate(waves):
    run = wave["steps"]
    ks = collections.Counter(k for s in run for k in s["k"])
    accepted = sum(sum(s["accepted"]) for s in run)
    split = {key: sum(s[key] for s in run) for key in ("verify_ms", "draft_ms", "other_ms")}
    gaps = sum(b["start"] - a["end"] for a, b in zip(run, run[1:], strict=False)) * 1e3
    print(
        f"wave {i} requests {len(wave['rids'])} steps {len(run):3d} plain {sum(s['plain'] for s in run):3d} "
        f"wall {(run[-1]['end'] - run[0]['start']) * 1e3:6.1f} ms  verify {split['verify_ms']:6.1f} "
        f"draft {split['draft_ms']:5.1f} other {split['other_ms']:5.1f} between steps {gaps:5.1f}  "
        f"accepted {accepted:3d}  K {dict(sorted(ks.items()))}"
    )
