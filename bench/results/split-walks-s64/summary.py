"""Scratch (64th session): the old / new step_profile runs of one A/B folder side by side (batch-1 and batch-8 decode
of the x48 copy: TPOT, its spread, the floor ratios against the run's own one-thread copy rate), and new / old
medians. `python summary.py DIR` prints a table and writes DIR/summary.json."""

import json
import statistics
import sys
from pathlib import Path

root = Path(sys.argv[1])
runs = {}
for path in sorted(root.glob("*/step_profile.json")):
    data = json.loads(path.read_text())
    rows = {(r["stage"], r["batch"]): r for r in data["rows"] if r["model"].endswith("x48")}
    runs[path.parent.name] = {
        "thread_copy_gb_s": data["thread_bandwidth_bytes_per_s"] / 1e9,
        **{
            f"b{batch}": {
                "tpot_ms": rows[("decode", batch)]["tpot_ms"],
                "tpot_spread_ms": rows[("decode", batch)]["tpot_spread_ms"],
                "expert_gemm_ms": rows[("decode", batch)]["expert_gemm_ms"],
                "over_thread_floor": rows[("decode", batch)]["tpot_over_thread_floor"],
            }
            for batch in (1, 8)
        },
    }
summary = {"runs": runs}
for batch in ("b1", "b8"):
    for side in ("old", "new"):
        for what in ("tpot_ms", "over_thread_floor"):
            values = [run[batch][what] for name, run in runs.items() if name.startswith(side)]
            summary[f"{side} {batch} {what} median"] = statistics.median(values)
            summary[f"{side} {batch} {what} range"] = [min(values), max(values)]
    summary[f"new/old {batch} tpot median"] = (
        summary[f"new {batch} tpot_ms median"] / summary[f"old {batch} tpot_ms median"]
    )
print(f"{'run':8} {'copy GB/s':>9} {'b1 TPOT':>8} {'b1/floor':>8} {'b8 TPOT':>8} {'b8/floor':>8}")
for name, run in runs.items():
    b1, b8 = run["b1"], run["b8"]
    print(
        f"{name:8} {run['thread_copy_gb_s']:9.1f} {b1['tpot_ms']:8.2f} {b1['over_thread_floor']:8.2f} "
        f"{b8['tpot_ms']:8.2f} {b8['over_thread_floor']:8.2f}"
    )
for key, value in summary.items():
    if key != "runs":
        print(key, [round(v, 3) for v in value] if isinstance(value, list) else round(value, 3))
(root / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
