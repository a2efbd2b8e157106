"""Scratch (68th session): py-spy (all threads, idle included) of one engine's scheduler process while batch-1 prose
requests of 32 tokens run back to back, 1 engine thread, as the deciding benches run it; with the requests' TPOT.
ENGINE: none | none-sync | standalone (the STANDALONE engine, every request at a K = 0 hint unless HINT is given).
Usage: PYTHONPATH=. python sample.py ENGINE OUT [hint-json]"""

import json
import statistics
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
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

engine, out = sys.argv[1], Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
hint = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {"policy": "static", "max_k": 0}
setup = deciding_setup()
model = timed_model(setup)
if engine == "standalone":
    cfg = bench_engine(model, speculation("standalone", setup), 1, drafter_settings())
else:
    extra = ("--disable-overlap-schedule",) if engine == "none-sync" else ()
    cfg = bench_engine(model, SpeculationConfig(), 1, extra=extra)
docs = [d[:400] for d in heldout_documents("prose", 6)]
tpots: list[float] = []
with running_engine(cfg, out / f"engine-{engine}.log") as url:
    served = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]

    def one(p):
        body = {"model": served, "prompt": p, "max_tokens": 32, "temperature": 0.0, "ignore_eos": True, "stream": True}
        if engine == "standalone":
            body["custom_params"] = {"moe_serve": hint}
        stamps = []
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=600) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data:") and "[DONE]" not in line:
                    stamps.append(time.perf_counter())
        # a chunk may carry several tokens (a plain burst's); the first carries the prefill's one token
        return (stamps[-1] - stamps[0]) / 31 * 1e3

    one(docs[0])
    stop = threading.Event()
    sampling = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            t = one(docs[i % len(docs)])
            if sampling.is_set():
                tpots.append(t)
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
    sampling.set()
    spy = str(Path(sys.executable).parent / "py-spy")
    args = ["record", "-r", "250", "-d", "20", "-f", "raw", "--nonblocking", "--threads", "--idle"]
    subprocess.run([spy, *args, "-p", str(sched.pid), "-o", str(out / f"stacks-{engine}.raw")], check=True)
    sampling.clear()
    stop.set()
    t.join()
summary = {"engine": engine, "hint": hint if engine == "standalone" else None, "tpot_ms": tpots}
summary["tpot_median_ms"] = statistics.median(tpots) if tpots else None
(out / f"tpot-{engine}.json").write_text(json.dumps(summary, indent=1) + "\n")
print(engine, "TPOT median", summary["tpot_median_ms"], "n", len(tpots))
