"""Scratch (34th session): py-spy of a plain moe-serve engine's scheduler during closed-loop greedy decode of 128-token
requests at batch B, 1 engine thread. usage (repo root): python pyspy_plain.py MODEL B OUT.raw [SECONDS]"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, os.getcwd())
from bench.decode_peer import generate, started  # noqa: E402

model, batch, out = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
secs = int(sys.argv[4]) if len(sys.argv) > 4 else 20
with started("moe-serve", model, 1, Path("/tmp"), None) as engine:
    url, served = engine["url"], engine["model"]
    prompts = [[5 + i, 17, 33, 99, 120] * 12 for i in range(batch)]
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            generate(url, served, prompts, 128)

    client = threading.Thread(target=loop, daemon=True)
    client.start()
    time.sleep(5)
    port = int(url.rsplit(":", 1)[1])
    pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    tree = [psutil.Process(os.getsid(pid)), *psutil.Process(os.getsid(pid)).children(recursive=True)]
    scheduler = max(tree, key=lambda p: p.cpu_percent(interval=1.0))  # the busy one while decoding
    py_spy = Path(sys.executable).with_name("py-spy")
    subprocess.run(
        [str(py_spy), "record", "-r", "500", "-f", "raw", "--nonblocking", "-d", str(secs), "-p", str(scheduler.pid),
         "-o", out],
        check=True,
    )  # fmt: skip
    stop.set()
    client.join()
