"""Scratch: CPU time of each process of a plain CPU engine (and of this client) during batch-1 decode of moe-fine
x48 (1 torch thread), over 8 s: how much of the second core the rest of the engine takes per token.

    PYTHONPATH=. .venv/bin/python bench/results/forward-thread-s61/cores.py SETTING
"""

import dataclasses
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

setting = sys.argv[1]
model = Path("build/bench-models/moe-fine-x48")
cfg = bench_engine(
    model, SpeculationConfig(), 1, settings=dataclasses.replace(EngineSettings(), forward_thread=setting)
)
with running_engine(cfg, log_path=Path(f"/tmp/cores-{setting}.log")) as url:
    name = served_model(url)
    stop, tokens = threading.Event(), [0]

    def load():
        while not stop.is_set():
            tokens[0] += run_batch(url, name, ["The history of the city begins with"], 160, 1)["tokens"]

    threading.Thread(target=load, daemon=True).start()
    time.sleep(4)
    port = int(url.rsplit(":", 1)[1])
    server = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    procs = [psutil.Process(server), *psutil.Process(server).children(recursive=True), psutil.Process()]
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    t0, n0 = time.monotonic(), tokens[0]
    time.sleep(8)
    wall = time.monotonic() - t0
    after = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    stop.set()
    print(f"forward_thread={setting}: {wall:.1f} s")
    for p in procs:
        label = "client (this process)" if p.pid == psutil.Process().pid else " ".join(p.cmdline())[:60]
        print(
            f"  {after[p.pid] - before[p.pid]:6.2f} s CPU = {(after[p.pid] - before[p.pid]) / wall:4.2f} cores  {label}"
        )
    print(f"  all: {sum(after[k] - before[k] for k in after) / wall:4.2f} cores")
