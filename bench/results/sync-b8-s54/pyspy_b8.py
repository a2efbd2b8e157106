"""Scratch (54th session): where a batch-8 step of the plain engine goes with and without SGLang's overlap scheduler.
Two plain engines on moe-fine x48 (1 thread) up together as in bench.policies (none, none-sync); for each in turn,
waves of 8 math prompts x 32 tokens back to back (cache flushed before each) while py-spy records its scheduler
process (-r 200, raw, DURATION s); then the other. Per engine: waves, tokens, mean TPOT; raw stacks to
OUT/<engine>.raw. Usage: pyspy_b8.py DURATION OUT"""

import concurrent.futures
import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import PROMPT_TOKENS, as_token_ids
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings


def scheduler_pid(url: str) -> int:
    port = int(url.rsplit(":", 1)[1])
    server = next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")
    procs = psutil.Process(server).children(recursive=True)
    return next(p.pid for p in procs if "scheduler" in " ".join(p.cmdline()) or "scheduler" in p.name())


def main() -> None:
    duration, out = int(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    model = timed_model(deciding_setup())
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["math"][:8]
    engines = {"none": (), "none-sync": ("--disable-overlap-schedule",)}
    report = {}
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, extra in engines.items():
            cfg = bench_engine(model, SpeculationConfig(), 1, EngineSettings(), extra)
            urls[name] = stack.enter_context(running_engine(cfg, log_path=out / f"{name}.log"))
        for name, url in urls.items():
            served, stop, waves = served_model(url), threading.Event(), []

            def load(url=url, served=served, stop=stop, waves=waves):
                while not stop.is_set():
                    flush_cache(url)
                    with concurrent.futures.ThreadPoolExecutor(8) as pool:
                        done = list(pool.map(complete, [url] * 8, [served] * 8, prompts, [32] * 8))
                    waves.append(sum(c.tpot_s for c in done) / 8 * 1e3)

            client = threading.Thread(target=load)
            client.start()
            time.sleep(4)
            py_spy = str(Path(sys.executable).parent / "py-spy")
            pid = scheduler_pid(url)
            start = len(waves)
            subprocess.run(
                [py_spy, "record", "-r", "200", "-d", str(duration), "-f", "raw", "--nonblocking", "-p", str(pid),
                 "-o", str(out / f"{name}.raw")],
                check=True, capture_output=True,
            )  # fmt: skip
            stop.set()
            client.join()
            report[name] = dict(waves=len(waves) - start, tpot_ms=waves[start:])
            print(name, report[name], flush=True)
    (out / "pyspy_b8.json").write_text(json.dumps(report, indent=1))


main()
