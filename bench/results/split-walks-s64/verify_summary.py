"""Scratch (64th session): old / new step_profile runs with a STANDALONE verify stage at static K = 4 (one folder per
run, `old-*` / `new-*`): per run the profiled verify step and its expert products at batch 1 and 8, the unprofiled
TPOT of that engine, and new / old medians. `python verify_summary.py DIR` prints them and writes DIR/summary.json."""

import json
import statistics
import sys
from pathlib import Path

root = Path(sys.argv[1])
runs = {}
for path in sorted(root.glob("*/step_profile.json")):
    rows = json.loads(path.read_text())["rows"]
    runs[path.parent.name] = {
        f"{r['stage']} b{r['batch']}": {
            "step_ms": r["step_ms"],
            "expert_gemm_ms": r["expert_gemm_ms"],
            "tpot_ms": r["tpot_ms"],
        }
        for r in rows
        if r["stage"] in ("verify", "decode")
    }
summary = {"runs": runs}
print(f"{'run':7} {'stage':10} {'step ms':>8} {'experts ms':>10} {'TPOT ms':>8}")
for name, stages in runs.items():
    for stage, row in stages.items():
        print(f"{name:7} {stage:10} {row['step_ms']:8.2f} {row['expert_gemm_ms']:10.2f} {row['tpot_ms']:8.2f}")
for stage in ("verify b1", "verify b8", "decode b1", "decode b8"):
    for what in ("step_ms", "expert_gemm_ms", "tpot_ms"):
        old = statistics.median(r[stage][what] for n, r in runs.items() if n.startswith("old"))
        new = statistics.median(r[stage][what] for n, r in runs.items() if n.startswith("new"))
        summary[f"{stage} {what} new/old"] = new / old
        print(f"{stage} {what}: old {old:.2f}, new {new:.2f}, new/old {new / old:.3f}")
(root / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
