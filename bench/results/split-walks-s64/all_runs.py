"""Scratch (64th session): every one-thread step_profile run of the x48 copy on this host today, by code: the batch-1
decode TPOT against the weight bytes at the one-thread copy rate of the same run (issue 15's floor goal, 1.5x).
`python all_runs.py` from the checkout's root prints them and writes all_runs.json beside this file."""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
CODE = {
    "8102750 (before)": ["all-runs/sp0", *(f"all-runs/{ab}-old-{i}" for ab in ("ab", "ab2") for i in (1, 2, 3))]
    + [f"ab/old-{i}" for i in (1, 2, 3, 4)]
    + [f"verify-k4/old-{i}" for i in (1, 2)],
    "split walks, one row timed once": ["all-runs/sp1", "all-runs/sp-plan-1", "all-runs/sp-plan-2"]
    + [f"all-runs/{ab}-new-{i}" for ab in ("ab", "ab2") for i in (1, 2, 3)],
    "e747cc3 (split walks, one row timed again)": [f"all-runs/sp-plan-{i}" for i in (3, 4, 5)]
    + [f"ab/new-{i}" for i in (1, 2, 3, 4)]
    + [f"verify-k4/new-{i}" for i in (1, 2)],
}
result = {}
for code, runs in CODE.items():
    ratios = {}
    for run in runs:
        data = json.loads((HERE / run / "step_profile.json").read_text())
        row = next(r for r in data["rows"] if r["stage"] == "decode" and r["batch"] == 1 and r["model"].endswith("x48"))
        ratios[run] = round(row["tpot_over_thread_floor"], 3)
    values = list(ratios.values())
    result[code] = {
        "runs": ratios,
        "median": statistics.median(values),
        "range": [min(values), max(values)],
        "at_most_1.5": sum(v <= 1.5 for v in values),
        "count": len(values),
    }
    print(
        f"{code}: median {result[code]['median']:.2f} [{min(values):.2f}, {max(values):.2f}], "
        f"<= 1.5x in {result[code]['at_most_1.5']} of {len(values)}"
    )
(HERE / "all_runs.json").write_text(json.dumps(result, indent=1) + "\n")
