"""Scratch (78th session): each step of the batch-8 waves of a step log that speculated in at most 5 of their steps
(moe-serve's, where static K = 1 speculates in all): batch size, K per request, plain or not, drafts verified and
accepted, the target's forward, drafting and other ms, the gap since the step before, NGRAM depths, shadow
outcomes ([judged, accepted] per draft), requests resting. Waves are split as ../judge-root-s68/waves.py splits
them (its loop copied: a record of what ran, as that one is).
usage: python wave_steps.py STEPS.jsonl.gz"""

import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") as f:
    rows = [json.loads(line) for line in f]
waves: list[dict] = []
for r in rows:
    ids = set(r["rids"])
    if not waves or not ids & waves[-1]["ids"]:
        waves.append({"ids": set(), "rows": []})
    waves[-1]["ids"] |= ids
    waves[-1]["rows"].append(r)
for w in waves:
    rs = w["rows"]
    if max(len(r["rids"]) for r in rs) < 8 or sum(not r["plain"] for r in rs) > 5:
        continue
    print("---")
    prev = None
    for r in rs:
        gap = (r["start"] - prev) * 1e3 if prev else 0.0
        prev = r["end"]
        kind = "plain" if r["plain"] else "SPEC"
        times = f"verify {r['verify_ms']:.1f} draft {r['draft_ms']:.1f} other {r['other_ms']:.1f} gap {gap:.1f}"
        print(len(r["rids"]), r["k"], kind, r["verified"], r["accepted"], times, r["depth"], r["shadow"], r["resting"])
