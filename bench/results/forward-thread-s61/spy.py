"""Scratch (61st session): py-spy of a plain CPU engine's scheduler process, its threads included, during batch-1
decode of moe-fine x48 (1 torch thread), 10 s at 250 Hz from 6 s after a closed-loop client starts; raw stacks to
/tmp/spy-LABEL.raw. LABEL on / off sets the patch's `forward_thread` setting (forward_thread.patch applied); any
other label runs the engine as committed.

    PYTHONPATH=. .venv/bin/python bench/results/forward-thread-s61/spy.py LABEL
"""

import dataclasses
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from bench._load import run_batch, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

label = sys.argv[1]
model = Path("build/bench-models/moe-fine-x48")
settings = EngineSettings()
if label in ("on", "off"):
    settings = dataclasses.replace(settings, forward_thread=label)
config = bench_engine(model, SpeculationConfig(), 1, settings=settings)
with running_engine(config, log_path=Path(f"/tmp/spy-{label}.log")) as url:
    name = served_model(url)
    stop = threading.Event()

    def load():
        while not stop.is_set():
            run_batch(url, name, ["The history of the city begins with"], 160, 1)

    threading.Thread(target=load, daemon=True).start()
    time.sleep(6)
    port = int(url.rsplit(":", 1)[1])
    server = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    procs = psutil.Process(server).children(recursive=True)
    sched = next(p for p in procs if "scheduler" in " ".join(p.cmdline()) or "scheduler" in p.name())
    spy = str(Path(sys.executable).parent / "py-spy")
    args = ["record", "-r", "250", "-d", "10", "-f", "raw", "--threads", "--idle", "--nonblocking", "-p"]
    subprocess.run([spy, *args, str(sched.pid), "-o", f"/tmp/spy-{label}.raw"], check=False)
    stop.set()
