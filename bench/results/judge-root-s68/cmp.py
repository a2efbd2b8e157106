"""Scratch (68th session): per drafter x task x batch cell of a bench.policies JSON, each policy's TPOT median
[min, max] of its rounds, A / B and A / none. usage: python cmp.py POLICIES.json A B"""

import json
import sys
from pathlib import Path

rows = json.loads(Path(sys.argv[1]).read_text())["rows"]
a, b = sys.argv[2], sys.argv[3]
t = {
    (r["drafter"], r["prompts"], r["batch"], r["policy"]): (r["tpot_ms"], r["tpot_ms_min"], r["tpot_ms_max"])
    for r in rows
}
policies = sorted({r["policy"] for r in rows})
for cell in sorted({(r["drafter"], r["prompts"], r["batch"]) for r in rows}):
    each = " ".join(f"{p}={t[(*cell, p)][0]:.2f}[{t[(*cell, p)][1]:.1f},{t[(*cell, p)][2]:.1f}]" for p in policies)
    ratio = t[(*cell, a)][0] / t[(*cell, b)][0]
    print(
        f"{cell[0]}/{cell[1]}/b{cell[2]} {each}  {a}/{b}={ratio:.3f} "
        f"{a}/none={t[(*cell, a)][0] / t[(*cell, 'none')][0]:.3f}"
    )
