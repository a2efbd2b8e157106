"""Scratch (61st session): moe-serve's TPOT over none's and over static-4's, per cell, in the 2-thread bench.policies
runs of the sixtieth session (before the change) and this one (after). usage: python cells.py > cells.txt"""

import json
from pathlib import Path

RUNS = {
    "s60 run 1": "bench/results/policies-2threads-s60/policies.json",
    "s60 run 2": "bench/results/policies-2threads-s60/policies-run2.json",
    "s61 (hope)": "bench/results/hope-s61/policies-2threads.json",
    "s61 (hope) run 2": "bench/results/hope-s61/policies-2threads-run2.json",
}
for name, path in RUNS.items():
    rows = json.loads(Path(path).read_text())["rows"]
    tpot = {(r["drafter"], r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in rows}
    cells = sorted({k[:3] for k in tpot})
    print(name)
    for cell in cells:
        ms, none, s4 = tpot.get((*cell, "moe-serve")), tpot.get((*cell, "none")), tpot.get((*cell, "static-4"))
        if ms and none and s4:
            print(
                f"  {'/'.join(map(str, cell)):22s} moe-serve {ms:6.2f} ms  / none {ms / none:5.3f}  / static-4 {ms / s4:5.3f}"
            )
