"""Scratch (68th session): each batch-1 request of a step log (run.py's STEP_LOG) in time order: steps, K and drafts
accepted per step, wall ms, and the judgements' outcomes ([judged, accepted] per chain) of its first steps that had
any; a line `--- gap` where the engine idled over 0.5 s between requests. From run 7 on (both drafter engines in one
step log) each line starts with the engine: SA where a step of the request ran a judgement or a draft forward of over
1 ms (the draft model), else NG (NGRAM, or a STANDALONE request that never judged nor drafted).
usage: python request_steps.py STEPS.jsonl.gz"""

import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") as f:
    rows = [json.loads(line) for line in f]
reqs: dict[str, list[dict]] = {}
for r in rows:
    if len(r["rids"]) == 1:
        reqs.setdefault(r["rids"][0], []).append(r)
prev = None
for rid, steps in reqs.items():
    if prev is not None and steps[0]["start"] - prev > 0.5:
        print(f"--- gap {steps[0]['start'] - prev:.1f} s")
    prev = steps[-1]["end"]
    ks = "".join(str(s["k"][0]) for s in steps)
    accepted = "".join(str(s["accepted"][0]) for s in steps)
    judged = [s["shadow"] for s in steps if s["shadow"]][:4]
    wall = round((steps[-1]["end"] - steps[0]["start"]) * 1e3)
    sa = any(s["judge_ms"] > 0 or s["judge_beside_ms"] > 0 or (s["k"][0] > 0 and s["draft_ms"] > 1.0) for s in steps)
    print(f"{'SA' if sa else 'NG'} {rid[:6]} {len(steps):3d} {ks:32s} {accepted:32s} {wall:5d} {judged}")
