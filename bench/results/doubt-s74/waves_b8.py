"""Scratch (74th session): each batch-8 wave of a step log with the policy that ran it (moe-serve's from $RID_LOG of
sitecustomize.py; others told by their K: one K throughout = static-K, none = k0), its steps, wall, and the medians of
its plain and speculative steps' wall and of the speculative steps' verify forward.
usage: PYTHONPATH=.:../zen5-b8-s72 python waves_b8.py STEPS.jsonl.gz RIDS.jsonl.gz"""

import gzip
import json
import statistics
import sys

from _waves import rows, waves  # ../zen5-b8-s72's helper

with gzip.open(sys.argv[2], "rt") as f:
    logged = {r["rid"]: r["policy"] for r in map(json.loads, f)}


def med(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


print("start policy: steps, wall s; plain steps, median ms; speculative steps, median ms, verify median ms")
for w in waves(rows(sys.argv[1])):
    if max(len(r["rids"]) for r in w) < 8:
        continue
    ks = sorted({max(r["k"]) for r in w if not r["plain"]})
    policy = logged.get(w[0]["rids"][0]) or (f"static-{ks[0]}" if len(ks) == 1 else "k0" if not ks else "?")
    spec = [r for r in w if not r["plain"]]
    plain = [r for r in w if r["plain"]]
    print(
        f"{w[0]['start']:.0f} {policy}: {len(w)}, {w[-1]['end'] - w[0]['start']:.2f}; {len(plain)}, "
        f"{med([(r['end'] - r['start']) * 1e3 for r in plain]):.1f}; {len(spec)}, "
        f"{med([(r['end'] - r['start']) * 1e3 for r in spec]):.1f}, {med([r['verify_ms'] for r in spec]):.1f}"
    )
