"""Prints each moe-serve wave of a scratch run step by step from the engine's step log: plain or speculative, the
batch, K, accepted drafts, draft depth found, resting requests, shadow judgements [judged, matched], step ms.
usage: python waves.py RUN_JSON STEPLOG_JSONL [HINT] (RUN_JSON: a steplog_ab.py or replay_history.py output)"""

import json
import sys
from pathlib import Path

runs = json.loads(Path(sys.argv[1]).read_text())["runs"]
steps = [json.loads(line) for line in Path(sys.argv[2]).read_text().splitlines()]
hint = sys.argv[3] if len(sys.argv) > 3 else "moe-serve"
for run in runs:
    if run["hint"] != hint:
        continue
    mine = [s for s in steps if run["t0"] <= s["start"] <= run["t1"]]
    print(run["hint"], run["round"], round(run["tpot_ms"], 1), "steps", len(mine))
    for s in mine:
        print(
            "  plain" if s["plain"] else "  spec ",
            "n",
            len(s["rids"]),
            "k",
            "".join(str(x) for x in s["k"]),
            "acc",
            "".join(str(x) for x in s["accepted"]),
            "depth",
            "".join(str(x) for x in (s.get("depth") or [])),
            "rest",
            s["resting"],
            "shadow",
            s.get("shadow"),
            "ms %.0f" % ((s["end"] - s["start"]) * 1e3),
        )
