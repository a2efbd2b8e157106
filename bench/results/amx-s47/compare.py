"""Per cell, TPOT median [min-max] of none, static-3 and moe-serve in the two policies runs beside this file
(policies-tuned: the plan may choose the AMX forms; policies-walks: `--cpu-gemm walks`, without them), and each
policy's ratio to its own run's none. Prints a table and writes compare.json.

    .venv/bin/python bench/results/amx-s47/compare.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = ("tuned", "walks")
POLICIES = ("none", "static-3", "moe-serve")
runs = {run: json.loads((HERE / f"policies-{run}" / "policies.json").read_text()) for run in RUNS}


def cell(rows, drafter, prompts, batch, policy):
    for row in rows:
        if (row["prompts"], row["batch"], row["policy"]) == (prompts, batch, policy) and (
            policy == "none" or row["drafter"] == drafter
        ):
            return row
    raise KeyError((drafter, prompts, batch, policy))


table = []
for drafter in ("ngram", "standalone"):
    for prompts in ("code", "math", "prose"):
        for batch in (1, 8):
            entry = {"drafter": drafter, "prompts": prompts, "batch": batch}
            for run in RUNS:
                none = cell(runs[run]["rows"], drafter, prompts, batch, "none")["tpot_ms"]
                for policy in POLICIES:
                    row = cell(runs[run]["rows"], drafter, prompts, batch, policy)
                    entry[f"{run}/{policy}"] = [round(row[k], 2) for k in ("tpot_ms", "tpot_ms_min", "tpot_ms_max")]
                    entry[f"{run}/{policy}/none"] = round(row["tpot_ms"] / none, 3)
            table.append(entry)
header = (
    ["cell"]
    + [f"{run} {p}" for run in RUNS for p in POLICIES]
    + [f"{run} {p}/none" for run in RUNS for p in POLICIES[1:]]
)
print(" | ".join(header))
for e in table:
    name = f"{e['drafter']} {e['prompts']} b{e['batch']}"
    vals = [f"{e[f'{r}/{p}'][0]} ({e[f'{r}/{p}'][1]}-{e[f'{r}/{p}'][2]})" for r in RUNS for p in POLICIES]
    ratios = [f"{e[f'{r}/{p}/none']}" for r in RUNS for p in POLICIES[1:]]
    print(" | ".join([name, *vals, *ratios]))
(HERE / "compare.json").write_text(json.dumps(table, indent=1))
