"""Scratch (67th session): the x48 decode rows of run.sh's step_profile runs, per configuration and round: TPOT, the
floor at the engine's threads' copy rate and the machine's, and TPOT over each. usage: python summary.py DIR"""

import json
import sys
from pathlib import Path

print("run                    batch  tpot_ms  thread_floor_ms  floor_ms  tpot/thread_floor  tpot/floor  copy_GB/s")
for path in sorted(Path(sys.argv[1]).glob("*/step_profile.json")):
    data = json.loads(path.read_text())
    for row in data["rows"]:
        if row["model"] != "moe-fine-x48" or row["stage"] != "decode":
            continue
        print(
            f"{path.parent.name:22s} {row['batch']:5d}  {row['tpot_ms']:7.2f}  {row['thread_floor_ms']:15.2f}  "
            f"{row['bandwidth_floor_ms']:8.2f}  {row['tpot_ms'] / row['thread_floor_ms']:17.2f}  "
            f"{row['tpot_ms'] / row['bandwidth_floor_ms']:10.2f}  {data['bandwidth_bytes_per_s'] / 1e9:9.1f}"
        )
