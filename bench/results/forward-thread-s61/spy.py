import subprocess, sys, threading, time, dataclasses
from pathlib import Path
import psutil
from bench._load import run_batch, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings
setting = sys.argv[1]  # a label only
model = Path("build/bench-models/moe-fine-x48")
cfg = bench_engine(model, SpeculationConfig(), 1, settings=dataclasses.replace(EngineSettings(), ))
with running_engine(cfg, log_path=Path(f"/tmp/spy-{setting}.log")) as url:
    name = served_model(url)
    stop = threading.Event()
    def load():
        while not stop.is_set():
            run_batch(url, name, ["The history of the city begins with"], 160, 1)
    t = threading.Thread(target=load, daemon=True); t.start()
    time.sleep(6)
    port = int(url.rsplit(":", 1)[1])
    server = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    procs = psutil.Process(server).children(recursive=True)
    sched = next(p for p in procs if "scheduler" in " ".join(p.cmdline()) or "scheduler" in p.name())
    subprocess.run([str(Path(sys.executable).parent / "py-spy"), "record", "-r", "250", "-d", "10", "-f", "raw", "--threads", "--idle", "--nonblocking", "-p", str(sched.pid), "-o", f"/tmp/spy-{setting}.raw"])
    stop.set()
