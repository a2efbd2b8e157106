"""Scratch (70th session): plain-decode TPOT of a two-thread bench engine (moe-fine x48) under OpenMP environment
settings, engines one at a time, settings rotated by round: batch 1 and batch 8 as ab_engine.py measures them.
usage: PYTHONPATH=. python omp_env.py OUT.json ROUNDS"""

import json
import os
import statistics
import sys
from pathlib import Path

from ab_engine import batch_time, tpot_ms  # noqa: I001 - this folder's script

from bench._models import bench_engine, deciding_setup, timed_model
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

SETTINGS = {
    "default": {},
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},  # the workers spin between regions, never sleep
    "bind": {"OMP_PROC_BIND": "true"},  # each thread kept on one core
}


def main() -> None:
    out, rounds = Path(sys.argv[1]), int(sys.argv[2])
    model = timed_model(deciding_setup())
    names = list(SETTINGS)
    rows = []
    for rnd in range(rounds):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
            saved = {k: os.environ.get(k) for k in SETTINGS[name]}
            os.environ.update(SETTINGS[name])
            try:
                config = bench_engine(model, SpeculationConfig(), 2)
                with running_engine(config, log_path=out.with_name(f"engine-{name}.log")) as url:
                    batch_time(url, 8, 16)  # warm
                    row = {"round": rnd, "setting": name, "b1_ms": tpot_ms(url, 1), "b8_ms": tpot_ms(url, 8)}
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            rows.append(row)
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    summary = {
        n: {b: statistics.median(r[b] for r in rows if r["setting"] == n) for b in ("b1_ms", "b8_ms")} for n in names
    }
    print("medians", json.dumps(summary))
    out.write_text(json.dumps({"settings": SETTINGS, "rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
