"""Scratch (69th session): one plain bench engine (moe-fine x48, as bench.policies starts it) left idle: the CPU its
SGLang processes use over 20 s (utime + stime from /proc, in ticks of 1/100 s per second: % of one core), then a
10 s py-spy of its scheduler (raw, to OUT). Why: bench.policies and bench.replay keep four engines up while one
works, and the replay's SLO is calibrated while two are up. usage: PYTHONPATH=. python idle.py OUT.raw"""

import subprocess
import sys
import time
from pathlib import Path

from bench._models import bench_engine, deciding_setup, timed_model
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine


def ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


config = bench_engine(timed_model(deciding_setup()), SpeculationConfig(), 1)
with running_engine(config, log_path=Path("/tmp/idle-engine.log")):
    time.sleep(5)
    found = subprocess.run(["pgrep", "-f", "sglang::"], capture_output=True, text=True).stdout.split()
    pids = [int(p) for p in found]
    names = {p: Path(f"/proc/{p}/comm").read_text().strip() for p in pids}
    before = {p: ticks(p) for p in pids}
    start = time.time()
    time.sleep(20)
    seconds = time.time() - start
    for p in pids:
        print(p, names[p], f"{(ticks(p) - before[p]) / seconds:.2f} % of a core")
    scheduler = next(p for p in pids if "sched" in names[p])
    spy = [".venv/bin/py-spy", "record", "-p", str(scheduler), "-d", "10", "-r", "200", "-f", "raw", "-o", sys.argv[1]]
    subprocess.run([*spy, "--idle"], capture_output=True, check=False)
