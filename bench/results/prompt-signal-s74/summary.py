"""Scratch (74th session): per task, the mean [min, max] of each measure of agreement.py's output.
usage: python summary.py out-8-32.json"""

import json
import statistics
import sys

with open(sys.argv[1]) as f:
    rows = json.load(f)["rows"]
for task in ("code", "math", "prose"):
    mine = [r for r in rows if r["task"] == task]
    cells = (
        f"{k} {statistics.mean(r[k] for r in mine):.2f} [{min(r[k] for r in mine):.2f}, {max(r[k] for r in mine):.2f}]"
        for k in ("prompt_agree", "prompt_next", "output_p1", "first8")
    )
    print(f"{task} ({len(mine)} prompts):", "; ".join(cells))
