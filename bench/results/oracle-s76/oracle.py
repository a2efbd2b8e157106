"""Scratch (76th session): the least batch-1 TPOT any policy choosing K per step could reach on the STANDALONE
engine, for run.py's requests, next to what none, k0, static K and moe-serve measured.

Each request's decode steps come from the step log (cut by the request's client window). A step's wall is priced per
request (task, prompt) from its static-K and k0 runs over the rounds: the median wall of its plain steps (k0), and of
its K-draft steps whose drafts were all accepted and of those with one rejected (the rejected drafts' tokens route to
other experts: a K = 4 step with a rejection is dearer), falling back to the task's medians where a request never
had that case. A chain drafted at output token j is accepted for hits.json's run of hits from j. The oracle knows the
hits and picks each step's K (0..4) by dynamic programming over the emitted tokens; the same prices replay static K
(checking the model: the static rows' simulated TPOT against their measured one, and the simulated accepted counts
against the log's). TPOT = the 31 decode steps' wall / 31 (the client's TPOT adds streaming).
usage: python oracle.py RUN_DIR hits.json"""

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path

TOKENS, MAX_K = 32, 4
run = Path(sys.argv[1])
hits = json.loads(Path(sys.argv[2]).read_text())
requests = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
with gzip.open(run / "steps.jsonl.gz", "rt") as f:  # the step log, gzipped in the commit
    steps = [json.loads(x) for x in f]


def steps_of(q):
    return [s for s in steps if q["start"] <= s["start"] <= q["end"] and len(s["rids"]) == 1]


prices = collections.defaultdict(list)  # (task, prompt, k, whole) -> walls ms
measured = collections.defaultdict(list)  # (task, policy) -> client TPOT ms
step_tpot = collections.defaultdict(list)  # (task, policy) -> logged steps' wall / 31
checked = collections.Counter()
for q in requests:
    key = (q["task"], q["policy"])
    measured[key].append(q["tpot_ms"])
    if q["policy"] == "none":
        continue
    st = steps_of(q)
    step_tpot[key].append(sum((s["end"] - s["start"]) * 1e3 for s in st) / (TOKENS - 1))
    if q["policy"] == "moe-serve":
        continue
    h, j = hits[q["task"]][q["prompt"]]["hits"], 0
    for s in st:
        k, a = (0, 0) if s["plain"] else (s["k"][0], s["accepted"][0])
        prices[(q["task"], q["prompt"], k, a == k)].append((s["end"] - s["start"]) * 1e3)
        if k:
            run_j = next((i for i, x in enumerate(h[j:] + [False]) if not x), 0)
            checked[min(k, run_j) == a] += 1
        j += a + 1


def price(task, prompt, k, whole):
    own = prices.get((task, prompt, k, whole))
    if own:
        return statistics.median(own)
    pooled = [w for (t, _, kk, wh), ws in prices.items() if t == task and kk == k and wh == whole for w in ws]
    if pooled:
        return statistics.median(pooled)
    return statistics.median([w for (t, _, kk, _), ws in prices.items() if t == task and kk == k for w in ws])


def run_of(h, j):
    n = 0
    while j + n < len(h) and h[j + n]:
        n += 1
    return n


def static(task, prompt, k):
    h, j, total = hits[task][prompt]["hits"], 0, 0.0
    while j < TOKENS - 1:
        a = min(k, run_of(h, j))
        total += price(task, prompt, k, a == k)
        j += a + 1
    return total / (TOKENS - 1)


def oracle(task, prompt):
    h, best, choice = hits[task][prompt]["hits"], {}, {}
    for j in range(TOKENS - 2, -1, -1):
        options = []
        for k in range(MAX_K + 1):
            a = min(k, run_of(h, j))
            options.append((price(task, prompt, k, a == k) + best.get(j + a + 1, 0.0), k))
        best[j], choice[j] = min(options)
    path, j = [], 0
    while j < TOKENS - 1:
        path.append(choice[j])
        j += min(choice[j], run_of(h, j)) + 1
    return best[0] / (TOKENS - 1), path


print(f"model check: simulated accepted counts equal the log's in {checked[True]} of {sum(checked.values())} steps")
rows = {}
for task in ("code", "math", "prose"):

    def med(name, task=task):
        return statistics.median(measured[(task, name)])

    sim = {f"static-{k}": statistics.mean(static(task, p, k) for p in range(3)) for k in range(1, MAX_K + 1)}
    sim["k0"] = statistics.mean(static(task, p, 0) for p in range(3))
    orc = [oracle(task, p) for p in range(3)]
    sim["oracle"] = statistics.mean(o[0] for o in orc)
    print(f"\n{task}: oracle K per step " + " | ".join("".join(map(str, o[1])) for o in orc))
    print(f"  {'policy':10s} client TPOT median  logged steps/31 median  simulated   / none (client)")
    for name in ("none", "k0", *(f"static-{k}" for k in range(1, MAX_K + 1)), "moe-serve", "oracle"):
        client = med(name) if (task, name) in measured else None
        logged = statistics.median(step_tpot[(task, name)]) if (task, name) in step_tpot else None
        s = sim.get(name)
        ratio = (client if client is not None else s) / med("none")
        print(
            f"  {name:10s} {client or float('nan'):8.2f} {logged or float('nan'):18.2f} {s or float('nan'):14.2f}"
            f" {ratio:10.3f}"
        )
        rows[f"{task}/{name}"] = {"client_tpot_ms": client, "logged_step_tpot_ms": logged, "simulated_ms": s}
(run / "oracle.json").write_text(json.dumps(rows, indent=1))
