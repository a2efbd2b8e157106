"""Scratch (76th session): a margin-gated chain on the batch-1 STANDALONE cells, simulated with oracle.py's prices.
At each step the draft model drafts depth by depth (up to 4) and stops at the first draft whose probability is
below RATIO times its runner-up's (chains.json: the draft's own chain at every root); the drafts before it are
verified (K of them; K = 0: a plain step). Price: oracle.py's for K (which holds K draft forwards), plus one draft
forward for the stopped depth (the log's median draft time per added depth; at K = 0 the first depth's, which holds
the drafting's fixed part).
usage: python gate.py RUN_DIR hits.json chains.json"""

import collections
import json
import statistics
import sys
from pathlib import Path

sys.argv = [sys.argv[0], sys.argv[1], sys.argv[2], *sys.argv[3:]]
chains = json.loads(Path(sys.argv[3]).read_text())
sys.argv = sys.argv[:3]
import oracle  # noqa: E402  (prints the oracle table first)

drafts = collections.defaultdict(list)
for s in oracle.steps:
    if not s["plain"] and len(s["rids"]) == 1:
        drafts[s["k"][0]].append(s["draft_ms"])
first = statistics.median(drafts[1])
added = (statistics.median(drafts[4]) - first) / 3
print(f"\ndraft time: first depth {first:.2f} ms, each further depth {added:.2f} ms")


def gated(task, prompt, ratio):
    rows, j, total, ks = chains[task][prompt], 0, 0.0, []
    while j < oracle.TOKENS - 1:
        c = rows[j]
        k = next((d for d, (p, q) in enumerate(zip(c["probs"], c["second"], strict=True)) if p < ratio * q), 4)
        a = min(k, c["accepted"])
        if k == 0:
            total += oracle.price(task, prompt, 0, True) + first
        else:
            total += oracle.price(task, prompt, k, a == k) + (added if k < 4 else 0.0)
        ks.append(k)
        j += a + 1
    return total / (oracle.TOKENS - 1), ks


print("simulated batch-1 TPOT ms (/ none's client median) per task; static-4 and the oracle from oracle.py")
for ratio in (1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0):
    cells = []
    for task in ("code", "math", "prose"):
        none = statistics.median(oracle.measured[(task, "none")])
        tpot = statistics.mean(gated(task, p, ratio)[0] for p in range(3))
        cells.append(f"{task} {tpot:.2f} ({tpot / none:.3f})")
    print(f"  ratio {ratio:4.2f}: " + ", ".join(cells))
