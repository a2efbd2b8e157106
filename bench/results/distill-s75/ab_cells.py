"""Per STANDALONE cell, each policy's TPOT median as a ratio to none's in the same run, for two bench.policies JSONs
(the old and the distilled draft, same host, one after the other). usage: ab_cells.py OLD.json NEW.json"""

import json
import sys
from pathlib import Path


def ratios(path: str) -> dict:
    rows = [r for r in json.loads(Path(path).read_text())["rows"] if r.get("engine") == "sglang"]
    tpot = {(r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in rows if r["drafter"] == "standalone"}
    return {k: t / tpot[(k[0], k[1], "none")] for k, t in tpot.items()}


old, new = ratios(sys.argv[1]), ratios(sys.argv[2])
policies = sorted({k[2] for k in new} - {"none"})
print("cell        " + "".join(f"{p:>17}" for p in policies))
for cell in sorted({k[:2] for k in new}):
    print(
        f"{cell[0]:>5} b{cell[1]:<5}" + "".join(f"{old[(*cell, p)]:>8.2f} ->{new[(*cell, p)]:>5.2f}" for p in policies)
    )
print("(TPOT / none's TPOT in the same run: old draft -> distilled draft)")
