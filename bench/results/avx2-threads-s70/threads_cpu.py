"""Scratch (70th session): batch-1 plain decode TPOT of a bench engine (moe-fine x48) at 1 and 2 engine threads,
engines alternating, with every thread's CPU on the machine during the long request (utime+stime from /proc).
usage: PYTHONPATH=. python bench/results/avx2-threads-s70/threads_cpu.py OUT.json [rounds]"""

import json
import sys
import time
from pathlib import Path

import requests as http

from bench._models import bench_engine, deciding_setup, timed_model
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def thread_ticks() -> dict[tuple[int, int], tuple[str, int]]:
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for task in (proc / "task").iterdir():
                stat = (task / "stat").read_text()
                comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat.rsplit(")", 1)[1].split()
                out[(int(proc.name), int(task.name))] = (comm, int(fields[11]) + int(fields[12]))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return out


def generate(url: str, n: int) -> float:
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    start = time.perf_counter()
    r = http.post(f"{url}/generate", json=body, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - start


rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
model = timed_model(deciding_setup())
results = []
for rnd in range(rounds):
    for threads in (1, 2) if rnd % 2 == 0 else (2, 1):
        config = bench_engine(model, SpeculationConfig(), threads)
        with running_engine(config, log_path=Path(f"/tmp/threads-cpu-engine-{threads}.log")) as url:
            generate(url, 16)
            short = min(generate(url, 32) for _ in range(2))
            before, t0 = thread_ticks(), time.time()
            long = generate(url, 200)
            seconds = time.time() - t0
            after = thread_ticks()
            tpot = (long - short) / 168 * 1e3
            busy = []
            for key, (comm, ticks) in after.items():
                if key in before:
                    pct = (ticks - before[key][1]) / seconds
                    if pct >= 2:
                        busy.append((round(pct, 1), key[0], key[1], comm))
            busy.sort(reverse=True)
            print(f"round {rnd} threads {threads}: TPOT {tpot:.2f} ms; threads >= 2 % of a core:", flush=True)
            for row in busy[:12]:
                print("   ", row, flush=True)
            results.append({"round": rnd, "threads": threads, "tpot_ms": tpot, "busy": busy})
Path(sys.argv[1]).write_text(json.dumps(results, indent=1))
