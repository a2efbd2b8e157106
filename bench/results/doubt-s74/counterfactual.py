"""Scratch (74th session): what doubting a judged request's acceptance by z standard errors would have changed in a
run of moe-serve without doubt (doubt_scratch.py's moe-serve-nodoubt with $DECIDE_LOG and STEP_LOG). Each
logged batch-1 decision is replayed as the allocation makes it at batch 1 (the least J at p over the K whose J falls
under K = 0's by the error margin, at p and, with doubt, at p lowered by z standard errors; z = 0 must give the
logged K); a bet the doubt would have declined is priced by what its step took against as many tokens at the
request's median plain step (a plain step inside a burst carries no scheduler step of its own, so this leans
against the bets), per task. Bets moved to another K > 0 are only counted.
usage: PYTHONPATH=.:../amx-b8-s73:../zen5-b8-s72 python counterfactual.py STEPS.jsonl.gz DECIDE.jsonl.gz"""

import collections
import gzip
import json
import statistics
import sys

from _tasks import batch1_by_task  # ../amx-b8-s73's helper

reqs, task_of = batch1_by_task(sys.argv[1])
with gzip.open(sys.argv[2], "rt") as f:
    decisions = [json.loads(line) for line in f]
zs = (0.25, 0.5, 0.75, 1.0, 1.5)  # doubt_scratch.DOUBTS, the order of each logged row's j_low


def replay(rows: list[dict], z_index: int | None) -> int:
    j0 = rows[0]["j"]
    best, best_j = 0, j0
    for row in rows[1:]:
        bar = j0 * (1.0 - row["error"])
        if row["j"] < bar and row["j"] < best_j and (z_index is None or row["j_low"][z_index] < bar):
            best, best_j = row["k"], row["j"]
    return best


by_rid = collections.defaultdict(list)
for d in decisions:
    by_rid[d["rid"]].append(d)
mismatch = sum(replay(d["rows"], None) != d["chosen"] for d in decisions)
plain_ref = {
    rid: statistics.median((s["end"] - s["start"]) * 1e3 for s in st if s["plain"])
    for rid, st in reqs.items()
    if any(s["plain"] for s in st)
}
# each logged decision with K > 0 -> the request's next speculative step, in order
bets = []
unmatched = 0  # requests whose logged bets and speculative steps do not pair up one to one: left out
for rid, ds in by_rid.items():
    spec = [s for s in reqs.get(rid, []) if not s["plain"]]
    chosen = [d for d in ds if d["chosen"] > 0]
    if rid not in task_of or len(spec) != len(chosen):
        unmatched += rid in task_of and bool(chosen or spec)
        continue
    for d, s in zip(chosen, spec, strict=True):
        tokens = s["accepted"][0] + 1
        net = (s["end"] - s["start"]) * 1e3 - tokens * plain_ref[rid]
        bets.append((task_of[rid], d, s["k"][0], tokens, net))
requests = collections.Counter(task_of[rid] for rid in by_rid if rid in task_of)
print(f"{len(decisions)} decisions, replayed at no doubt: {mismatch} differ from the logged K")
print(f"{len(bets)} bets matched to their steps ({unmatched} requests left out: bets and steps not one to one)")
print(f"requests with a logged decision per task: {dict(requests)}")
print("task: bets, their net ms (step wall - tokens x plain step; > 0 = lost)")
for task in sorted(requests):
    mine = [b for b in bets if b[0] == task]
    print(f"  {task}: {len(mine)}, {sum(b[4] for b in mine):+.0f} ms")
print("z task: bets declined, their net ms (what declining saves), bets moved to another K > 0, ms per request saved")
for zi, z in enumerate(zs):
    for task in sorted(requests):
        mine = [b for b in bets if b[0] == task]
        declined = [b for b in mine if replay(b[1]["rows"], zi) == 0]
        moved = [b for b in mine if 0 < replay(b[1]["rows"], zi) != b[1]["chosen"]]
        saved = sum(b[4] for b in declined)
        print(
            f"  {z} {task}: {len(declined)}, {saved:+.0f} ms, {len(moved)} moved, "
            f"{saved / max(requests[task], 1):+.1f} ms/request"
        )
