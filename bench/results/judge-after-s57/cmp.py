"""Scratch (fifty-seventh session): moe-serve's and none-sync's TPOT over none's per cell (median [min-max] of
moe-serve's rounds) of the A/B runs here, and the mean of moe-serve's over the cells. usage: python cmp.py NAME...
> cmp.txt"""

import json
import sys

for name in sys.argv[1:]:
    with open(f"bench/results/judge-after-s57/{name}/policies.json") as f:
        rows = json.load(f)["rows"]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["prompts"], r["batch"]), {})[r["policy"]] = (
            r["tpot_ms"],
            r["tpot_ms_min"],
            r["tpot_ms_max"],
        )
    out, ratios = [], []
    for (task, batch), v in sorted(cells.items()):
        ratios.append(v["moe-serve"][0] / v["none"][0])
        none, ms = v["none"][0], v["moe-serve"]
        out.append(f"{task[:4]}{batch} {ms[0] / none:.3f} [{ms[1] / none:.2f}-{ms[2] / none:.2f}]")
        out[-1] += f" ns {v['none-sync'][0] / none:.2f}"
    print(name.ljust(8), " | ".join(out), f"| mean {sum(ratios) / len(ratios):.3f}")
