"""Scratch (62nd session): moe-serve's TPOT over none's, none-sync's and the cell's best other policy's, per cell, in
this session's three bench.policies runs on a 2-core Intel Xeon with AMX: the block's (engines at 1 thread, by
bench.run_all) and two at 2 threads. usage: python bench/results/amx-host-s62/cells.py > cells.txt; with arguments
(67th session) the runs given instead: python bench/results/amx-host-s62/cells.py PATH [PATH ...] (RUNS's first path,
bench/results/policies/policies.json, holds the latest block's run since the 62nd session's)"""

import json
import sys
from pathlib import Path

RUNS = {
    "1 thread (the block, bench.run_all --only policies,replay)": "bench/results/policies/policies.json",
    "2 threads (bench.policies --engine-threads 2 --no-peer)": "bench/results/amx-host-s62/policies/policies.json",
    "2 threads, run 2": "bench/results/amx-host-s62/policies-run2/policies.json",
}
for name, path in ({p: p for p in sys.argv[1:]} or RUNS).items():
    rows = json.loads(Path(path).read_text())["rows"]
    tpot = {(r["drafter"], r["prompts"], r["batch"], r["policy"]): r["tpot_ms"] for r in rows}
    print(name)
    for cell in sorted({k[:3] for k in tpot}):
        ms, none, sync = (tpot.get((*cell, p)) for p in ("moe-serve", "none", "none-sync"))
        others = {k[3]: v for k, v in tpot.items() if k[:3] == cell and k[3] not in ("moe-serve", "none", "none-sync")}
        best = min(others, key=others.get)
        print(
            f"  {'/'.join(map(str, cell)):18s} moe-serve {ms:6.2f} ms  / none {ms / none:5.3f}  / none-sync "
            f"{ms / sync:5.3f}  / best other ({best}) {ms / others[best]:5.3f}"
        )
