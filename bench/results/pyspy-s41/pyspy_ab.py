"""Scratch profile (41st session): py-spy over the NGRAM deciding engine (moe-fine x48) while it serves the same
batch-1 math requests under two hints, moe-serve and K = 0, alternating, so where moe-serve's extra time per token
goes shows in the scheduler's own samples. usage: python pyspy_ab.py [TASK] [ROUNDS] [BATCH] [RATE] -> raw py-spy files + summary"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.getcwd())
from pathlib import Path

import psutil

from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import as_token_ids, speculation
from moe_sglang.server import running_engine

TASK = sys.argv[1] if len(sys.argv) > 1 else "math"
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
BATCH = int(sys.argv[3]) if len(sys.argv) > 3 else 1
RATE = sys.argv[4] if len(sys.argv) > 4 else "250"
HERE = Path(__file__).parent
HINTS = {
    "moe-serve": {"custom_params": {"moe_serve": {"policy": "moe-serve"}}},
    "k0": {"custom_params": {"moe_serve": {"policy": "static", "max_k": 0}}},
}
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(max(BATCH, 3), 400), model, 128)[TASK][: max(BATCH, 3)]
with running_engine(bench_engine(model, speculation("ngram", setup), 1), log_path="/tmp/pyspy-ngram.log") as url:
    port = url.rsplit(":", 1)[1]
    server = next(p for p in psutil.process_iter(["cmdline"]) if port in " ".join(p.info["cmdline"] or []))
    name = served_model(url)
    for hint in HINTS.values():  # warm both paths
        flush_cache(url)
        run_batch(url, name, prompts[:1], 8, 1, hint)
    tpot = {k: [] for k in HINTS}
    for r in range(ROUNDS):
        for label, hint in HINTS.items():
            out = HERE / f"{label}-b{BATCH}-{r}.raw"
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "--pid",
                    str(server.pid),
                    "--subprocesses",
                    "--rate",
                    RATE,
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(2.0)
            flush_cache(url)
            res = run_batch(url, name, prompts, 32, BATCH, hint)
            tpot[label].append(res["tpot_ms"])
            spy.send_signal(2)
            spy.wait()
            print(label, r, f"{res['tpot_ms']:.1f} ms", flush=True)
    print(tpot)
