"""Scratch sampling of the fifty-second session (README, issue 15): where a plain engine's scheduler process spends a
batch-1 decode step outside the model forward. Starts the plain CPU engine (1 thread) on MODEL, keeps one closed-loop
client decoding (max_tokens 160, ignore_eos), and records the scheduler process with py-spy (-r 250, raw stacks, 20
s, from 8 s after the load starts). Writes OUT/stacks.raw. Then summary.py reads it. Run from the repository root:
PYTHONPATH=. .venv/bin/python bench/results/sched-pyspy-s52/sample.py MODEL OUT"""

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from bench.decode_peer import generate
from moe_sglang.launch import EngineConfig
from moe_sglang.server import running_engine

model, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
with running_engine(EngineConfig(model_path=str(model), port=0, threads=1), out / "engine.log") as url:
    served = model.name
    generate(url, served, ["Once upon a time"], 8)
    stop = threading.Event()

    def load():
        while not stop.is_set():
            generate(url, served, ["The history of the city begins with"], 160)

    client = threading.Thread(target=load, daemon=True)
    client.start()
    time.sleep(8)
    port = int(url.rsplit(":", 1)[1])
    server = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    procs = psutil.Process(server).children(recursive=True)
    sched = next(p for p in procs if "scheduler" in " ".join(p.cmdline()) or "scheduler" in p.name())
    subprocess.run(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-r",
            "250",
            "-d",
            "20",
            "-f",
            "raw",
            "--nonblocking",
            "-p",
            str(sched.pid),
            "-o",
            str(out / "stacks.raw"),
        ],
        check=True,
    )
    stop.set()
    client.join()
