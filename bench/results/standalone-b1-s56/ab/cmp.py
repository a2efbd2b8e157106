"""Scratch (fifty-sixth session): moe-serve's and none-sync's TPOT over none's per cell (median [min-max] of
moe-serve's rounds) of the A/B runs here. usage: python cmp.py [--dir FOLDER] [--mean] NAME... > cmp.txt
(--dir: the runs' folder, default this one; --mean: moe-serve's mean over the cells at the end of each line, as
bench/results/judge-after-s57 reads its runs)"""

import json
import sys
from pathlib import Path

args = sys.argv[1:]
folder = Path(__file__).parent
if args[:1] == ["--dir"]:
    folder, args = Path(args[1]), args[2:]
mean = args[:1] == ["--mean"]
names = args[1:] if mean else args

for name in names:
    with open(folder / name / "policies.json") as f:
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
        none, ms = v["none"][0], v["moe-serve"]
        ratios.append(ms[0] / none)
        out.append(f"{task[:4]}{batch} {ms[0] / none:.3f} [{ms[1] / none:.2f}-{ms[2] / none:.2f}]")
        out[-1] += f" ns {v['none-sync'][0] / none:.2f}"
    print(name.ljust(8), " | ".join(out) + (f" | mean {sum(ratios) / len(ratios):.3f}" if mean else ""))
