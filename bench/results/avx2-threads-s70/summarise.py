"""The medians and quartiles of the op-library A/B (ab-lib/ab8-{old,new}-N.json, threads.py's output, processes
alternating old / new): per variant, thread count and measure. usage: python summarise.py [FOLDER]"""

import json
import statistics
import sys
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "ab-lib")
for variant in ("old", "new"):
    files = sorted(folder.glob(f"ab8-{variant}-*.json"))
    rows = [row for f in files for row in json.loads(f.read_text())["rows"]]
    for key in ("moe_step_ms", "moe_step_b8_ms", "sum_gb_s"):
        for threads in (1, 2):
            values = [r[key] for r in rows if r["threads"] == threads]
            quartiles = [round(q, 2) for q in statistics.quantiles(values, n=4)]
            print(
                f"{variant} {key:15s} {threads} thread(s): median {statistics.median(values):6.2f}, quartiles "
                f"{quartiles}, n = {len(values)} ({len(files)} processes)"
            )
