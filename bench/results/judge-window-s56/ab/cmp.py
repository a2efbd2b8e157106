"""Scratch (fifty-sixth session): moe-serve's TPOT over none's per STANDALONE cell, and their mean, of the windowed
judgement's runs here and the unchanged policy's (../../standalone-b1-s56/ab). usage: python cmp.py > cmp.txt"""

import json

RUNS = {
    "base": "bench/results/standalone-b1-s56/ab/base",
    "base2": "bench/results/standalone-b1-s56/ab/base2",
    "base3": "bench/results/judge-window-s56/ab/base3",
    "window": "bench/results/judge-window-s56/ab/window",
    "window2": "bench/results/judge-window-s56/ab/window2",
}
for name, folder in RUNS.items():
    with open(f"{folder}/policies.json") as f:
        rows = json.load(f)["rows"]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault((r["prompts"], r["batch"]), {})[r["policy"]] = r["tpot_ms"]
    ratios = {f"{task[:4]}{batch}": v["moe-serve"] / v["none"] for (task, batch), v in sorted(cells.items())}
    line = " | ".join(f"{cell} {ratio:.3f}" for cell, ratio in ratios.items())
    print(name.ljust(8), line, f" mean {sum(ratios.values()) / len(ratios):.3f}")
