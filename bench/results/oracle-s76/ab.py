"""Scratch (76th session): run.py's requests per task and policy: per round the mean client TPOT over the task's
three prompts, then the median [min, max] over rounds, and the same over the step log's decode steps (their wall /
31); speculative steps, drafts verified and accepted per request (step log).
usage: python ab.py RUN_DIR"""

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path

run = Path(sys.argv[1])
requests = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
with gzip.open(run / "steps.jsonl.gz", "rt") as f:  # the step log, gzipped in the commit
    steps = [json.loads(x) for x in f]
client, logged = collections.defaultdict(list), collections.defaultdict(list)
counts = collections.defaultdict(collections.Counter)
for q in requests:
    key = (q["task"], q["policy"], q["round"])
    client[key].append(q["tpot_ms"])
    if q["policy"] == "none":
        continue
    st = [s for s in steps if q["start"] <= s["start"] <= q["end"] and len(s["rids"]) == 1]
    logged[key].append(sum((s["end"] - s["start"]) * 1e3 for s in st) / 31)
    c = counts[(q["task"], q["policy"])]
    c["requests"] += 1
    for s in st:
        if not s["plain"]:
            c["spec steps"] += 1
            c["verified"] += s["verified"][0]
            c["accepted"] += s["accepted"][0]


def summary(table, task, policy):
    per_round = [statistics.mean(v) for (t, p, _), v in sorted(table.items()) if (t, p) == (task, policy)]
    if not per_round:
        return "-"
    return f"{statistics.median(per_round):6.2f} [{min(per_round):.2f}, {max(per_round):.2f}]"


policies = list(dict.fromkeys(q["policy"] for q in requests))
for task in ("code", "math", "prose"):
    base = "none" if "none" in policies else policies[0]  # the ratio column's reference
    none = statistics.median(statistics.mean(v) for (t, p, _), v in client.items() if (t, p) == (task, base))
    print(f"{task} ({base}'s client TPOT {none:.2f} ms): policy, client TPOT ms, logged steps/31 ms, per request:"
          " speculative steps, verified, accepted")  # fmt: skip
    for p in policies:
        c = counts[(task, p)]
        n = max(c["requests"], 1)
        med = statistics.median(statistics.mean(v) for (t, pp, _), v in client.items() if (t, pp) == (task, p))
        print(f"  {p:17s} {summary(client, task, p):22s} {med / none:5.3f}x  {summary(logged, task, p):22s}"
              f" {c['spec steps'] / n:5.1f} {c['verified'] / n:5.1f} {c['accepted'] / n:5.1f}")  # fmt: skip

# paired: the same prompt in the same round (the host's speed drifts between rounds by up to 1.4x), logged steps/31
pairs = [p.split("/") for p in (sys.argv[2].split(",") if len(sys.argv) > 2 else [])]
by_request = {(q["task"], q["prompt"], q["round"], q["policy"]): q for q in requests}


def logged_of(q):
    st = [s for s in steps if q["start"] <= s["start"] <= q["end"] and len(s["rids"]) == 1]
    return sum((s["end"] - s["start"]) * 1e3 for s in st) / 31


for a, b in pairs:
    print(f"paired {a} / {b}, logged steps/31 per (prompt, round): median [quartiles] (n)")
    for task in ("code", "math", "prose"):
        ratios = sorted(
            logged_of(q) / logged_of(by_request[(t, p, r, b)])
            for (t, p, r, pol), q in by_request.items()
            if t == task and pol == a and (t, p, r, b) in by_request
        )
        n = len(ratios)
        print(f"  {task}: {statistics.median(ratios):.3f} [{ratios[n // 4]:.3f}, {ratios[3 * n // 4]:.3f}] ({n})")
