"""Scratch (51st session): moe-serve's and static K = 4's median TPOT over none's, per STANDALONE cell, in each
policies JSON of this folder. usage: python bench/results/prose-b8-s51/ratios.py"""

import json
from pathlib import Path

HERE = Path(__file__).parent
for path in sorted(HERE.glob("*/policies.json")):
    rows = json.loads(path.read_text())["rows"]
    tpot = {(r["drafter"], r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in rows}
    print(path.parent.name)
    for task in ("code", "math", "prose"):
        for b in (1, 8):
            none = tpot[("standalone", task, b, "none")]
            policies = [p for p in ("moe-serve", "static-4", "none-sync") if ("standalone", task, b, p) in tpot]
            cells = [f"{p} {tpot[('standalone', task, b, p)] / none:.2f}" for p in policies]
            print(f"  standalone {task} b{b}: none {none:.1f} ms; " + ", ".join(cells))
