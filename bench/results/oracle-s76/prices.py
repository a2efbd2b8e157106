"""Scratch (76th session): a run's static-4, static-stop and k0 steps by drafts verified and whether all were accepted
(median wall, draft, verify, other ms), and the simulated batch-1 TPOT (decode steps' wall / 31) at these prices of
static K = 4, the margin stop at ratios 1.05-1.5 and a perfect stop (at the first draft the target rejects), from chains.json.
usage: python prices.py RUN_DIR chains.json"""

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path

run = Path(sys.argv[1])
chains = json.loads(Path(sys.argv[2]).read_text())
requests = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
with gzip.open(run / "steps.jsonl.gz", "rt") as f:
    steps = [json.loads(x) for x in f]
by_case, prices = collections.defaultdict(list), collections.defaultdict(list)
for q in requests:
    if q["policy"] not in ("static-4", "static-stop", "k0"):
        continue
    for s in steps:
        if q["start"] <= s["start"] <= q["end"] and len(s["rids"]) == 1:
            whole = None if s["plain"] else s["accepted"][0] == s["verified"][0]
            k = "plain" if s["plain"] else s["verified"][0]
            by_case[(q["policy"], k, whole)].append(s)
            prices[(q["task"], k, whole)].append((s["end"] - s["start"]) * 1e3)
print("policy, drafts verified, all accepted: steps, median wall / draft / verify / other ms")
for key in sorted(by_case, key=str):
    v = by_case[key]
    parts = [[(s["end"] - s["start"]) * 1e3 for s in v]] + [
        [s[f] for s in v] for f in ("draft_ms", "verify_ms", "other_ms")
    ]
    print(f"  {key} {len(v)}: " + " / ".join(f"{statistics.median(x):.2f}" for x in parts))


def price(task, k, whole):
    own = prices.get((task, k, whole)) or prices.get((task, k, not whole))
    if own:  # k = 0: a step whose chains all stopped at their first draft (static-stop's)
        return statistics.median(own)
    return statistics.median([w for (_, kk, _), ws in prices.items() if kk == k for w in ws])  # other tasks


def simulated(task, rule):
    per_request = []
    for rows in chains[task]:
        j = total = 0
        while j < 31:
            c = rows[j]
            k = rule(c)
            a = min(k, c["accepted"])
            total += price(task, k, a == k)
            j += a + 1
        per_request.append(total / 31)
    return statistics.mean(per_request)


def margin_stop(ratio):
    def rule(c):
        return next((d for d, (p, q) in enumerate(zip(c["probs"], c["second"], strict=True)) if p < ratio * q), 4)

    return rule


RATIOS = (1.05, 1.1, 1.2, 1.3, 1.5)
print(
    f"simulated batch-1 TPOT ms at these prices: plain step, static-4, stop at {', '.join(map(str, RATIOS))}, perfect"
)
for task in ("code", "math", "prose"):
    plain = statistics.median(prices[(task, "plain", None)])
    cells = [simulated(task, lambda c: 4), *(simulated(task, margin_stop(r)) for r in RATIOS)]
    cells.append(simulated(task, lambda c: min(c["accepted"], 4)))
    print(f"  {task}: {plain:.2f}, " + ", ".join(f"{x:.2f}" for x in cells))
