"""Scratch (35th session): in-run A/B of two moe-serve engines on different code (PYTHONPATH per engine), plain
greedy decode TPOT from two output lengths, rounds interleaved. usage: python ab.py MODEL OUT.json A=PATH B=PATH
[ROUNDS]"""

import contextlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench.decode_peer import generate, started  # noqa: E402

model, out = Path(sys.argv[1]), Path(sys.argv[2])
codes = dict(a.split("=", 1) for a in sys.argv[3:5])
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 5
rows = []
with contextlib.ExitStack() as stack:
    engines = {}
    for name, path in codes.items():
        os.environ["PYTHONPATH"] = path
        folder = Path(f"/tmp/s35/ab-{name}")
        folder.mkdir(exist_ok=True)
        engines[name] = stack.enter_context(started("moe-serve", model, 1, folder, None))
    for r in range(rounds):
        for batch in (1, 8):
            prompts = [[5 + i + r, 17, 33, 99, 120] * 12 for i in range(batch)]
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                e = engines[name]
                t0 = time.perf_counter()
                generate(e["url"], e["model"], prompts, 8)
                t1 = time.perf_counter()
                generate(e["url"], e["model"], prompts, 136)
                t2 = time.perf_counter()
                rows.append(dict(round=r, batch=batch, code=name, tpot_ms=((t2 - t1) - (t1 - t0)) / 128 * 1e3))
                print(rows[-1], flush=True)
summary = {}
for batch in (1, 8):
    ratios = []
    for r in range(rounds):
        x = {row["code"]: row["tpot_ms"] for row in rows if row["batch"] == batch and row["round"] == r}
        ratios.append(x["B"] / x["A"])
    ratios.sort()
    summary[f"b{batch}"] = dict(median=ratios[len(ratios) // 2], min=ratios[0], max=ratios[-1])
print(summary)
out.write_text(json.dumps(dict(model=str(model), codes=codes, rows=rows, ratio_B_over_A=summary), indent=1))
