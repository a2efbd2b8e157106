"""Scratch (64th session): moe-serve's TPOT / none's per cell in the base policies run and the two runs with
slow_acceptance.patch, with static-4's for scale, and each run's first five goals. `python compare.py` from the
checkout's root prints the table (compare.txt)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {
    "base": HERE.parent / "policies-2threads" / "policies.json",
    "slow-1": HERE / "run1" / "policies.json",
    "slow-2": HERE / "run2" / "policies.json",
}
data = {name: json.loads(path.read_text()) for name, path in RUNS.items()}
tpot = {
    name: {(r["drafter"], r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in d["rows"]}
    for name, d in data.items()
}
print("cell                       " + "".join(f"{name + ' ms/none':>22}" for name in RUNS) + "  static-4/none per run")
for cell in sorted({key[:3] for key in tpot["base"]}):
    mine = "".join(
        f"{tpot[n][(*cell, 'moe-serve')]:7.2f}/{tpot[n][(*cell, 'none')]:6.2f} {tpot[n][(*cell, 'moe-serve')] / tpot[n][(*cell, 'none')]:5.2f}"
        + "  "
        for n in RUNS
    )
    scale = " ".join(f"{tpot[n][(*cell, 'static-4')] / tpot[n][(*cell, 'none')]:.2f}" for n in RUNS)
    print(f"{'/'.join(map(str, cell)):26} {mine} {scale}")
for name, d in data.items():
    print(name, "; ".join(f"{g['goal']}: {g['value']:.3f} ({g['detail']})" for g in d["goals"][:5]))
