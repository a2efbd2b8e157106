"""Scratch (73rd session): per cell of a bench.policies JSON, moe-serve's TPOT median, its ratio to none's and to
none-sync's, and the best other policy with that policy's own ratio to none (as ../amx-host-s69/cells.txt).
usage: python cells.py POLICIES.json > cells.txt"""

import json
import sys
from pathlib import Path

rows = json.loads(Path(sys.argv[1]).read_text())["rows"]
tpot = {
    (r["drafter"], r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in rows if r.get("engine") == "sglang"
}
BASE = ("none", "none-sync", "moe-serve")
for drafter, prompts, batch in sorted({k[:3] for k in tpot}):
    mine = {p: t for (d, q, b, p), t in tpot.items() if (d, q, b) == (drafter, prompts, batch)}
    if "moe-serve" not in mine:
        continue
    others = {p: t for p, t in mine.items() if p not in BASE}
    best = min(others, key=others.get)
    print(
        f"  {drafter}/{prompts}/{batch:<2} moe-serve {mine['moe-serve']:6.2f} ms  / none {mine['moe-serve'] / mine['none']:.3f}"
        f"  / none-sync {mine['moe-serve'] / mine['none-sync']:.3f}  / best other ({best}) {others[best] / mine['none']:.3f}"
    )
