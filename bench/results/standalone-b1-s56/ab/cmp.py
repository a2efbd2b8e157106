"""Scratch (fifty-sixth session): moe-serve's and none-sync's TPOT over none's per cell (median [min-max] of
moe-serve's rounds) of the A/B runs here. usage: python cmp.py NAME... > cmp.txt"""

import json
import sys

for name in sys.argv[1:]:
    with open(f"bench/results/standalone-b1-s56/ab/{name}/policies.json") as f:
        rows = json.load(f)["rows"]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["prompts"], r["batch"]), {})[r["policy"]] = (
            r["tpot_ms"],
            r["tpot_ms_min"],
            r["tpot_ms_max"],
        )
    out = []
    for (task, batch), v in sorted(cells.items()):
        none, ms = v["none"][0], v["moe-serve"]
        out.append(f"{task[:4]}{batch} {ms[0] / none:.3f} [{ms[1] / none:.2f}-{ms[2] / none:.2f}]")
        out[-1] += f" ns {v['none-sync'][0] / none:.2f}"
    print(name.ljust(8), " | ".join(out))
