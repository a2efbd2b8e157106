"""Scratch (63rd session): py-spy of a STANDALONE engine's scheduler under batch-1 prose at static K=4 (or a policy
given as argv[2]), 2 threads. Usage: PYTHONPATH=. python sample_spec.py OUT [policy-json]"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from bench._heldout import heldout_documents
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import drafter_settings, speculation
from moe_sglang.server import running_engine

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
hint = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"policy": "static", "max_k": 4}
setup = deciding_setup()
model = timed_model(setup)
cfg = bench_engine(model, speculation("standalone", setup), 1, drafter_settings())
docs = [d[:400] for d in heldout_documents("prose", 6)]
with running_engine(cfg, out / "engine.log") as url:
    served = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]

    def one(p):
        body = {
            "model": served,
            "prompt": p,
            "max_tokens": 32,
            "temperature": 0.0,
            "ignore_eos": True,
            "custom_params": {"moe_serve": hint},
        }
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
        assert r.status_code == 200, r.text

    one(docs[0])
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            one(docs[i % len(docs)])
            i += 1

    t = threading.Thread(target=load, daemon=True)
    t.start()
    time.sleep(5)
    port = int(url.rsplit(":", 1)[1])
    server = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    procs = psutil.Process(server).children(recursive=True)
    for p in procs:
        p.cpu_percent(None)
    time.sleep(2)
    sched = max(procs, key=lambda p: p.cpu_percent(None))
    print("sampling", sched.pid, sched.name(), flush=True)
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
    t.join()
