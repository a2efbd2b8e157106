"""Scratch (61st session): moe-serve's TPOT over none's and over static-4's per cell in the four runs of run.sh
(base, standing prior m = 2, base, m = 2). usage: python compare.py DIR > compare.txt"""

import json
import sys
from pathlib import Path

root = Path(sys.argv[1])
for run in ("base1", "m2a", "base2", "m2b"):
    rows = json.loads((root / f"policies-{run}.json").read_text())["rows"]
    tpot = {(r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in rows if r["drafter"] == "standalone"}
    cells = sorted({k[:2] for k in tpot})
    parts = []
    for cell in cells:
        ms, none, s4 = (tpot[(*cell, p)] for p in ("moe-serve", "none", "static-4"))
        parts.append(f"{cell[0]} b{cell[1]}: {ms:5.2f} ms, /none {ms / none:.3f}, /static-4 {ms / s4:.3f}")
    print(f"{run:6s} " + " | ".join(parts))
