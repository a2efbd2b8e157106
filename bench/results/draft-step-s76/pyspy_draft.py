"""Scratch (76th session): where a batch-1 STANDALONE speculative step's draft time goes (the step log's draft_ms,
~4.1-4.4 ms at K = 4 on a Zen 4 EPYC, against ~0.4 ms warm / ~1.1 ms cold for one direct draft forward measured
alone, ../draft-forward-s48/one_forward.py). A STANDALONE engine on moe-fine x48 (bench.policies' drafter settings,
one engine thread), code prompts one at a time for SECONDS at a static K, py-spy recording the scheduler process
(raw stacks, 500 Hz, non-blocking, idle samples left out); the step log beside.
usage: PYTHONPATH=. python bench/results/draft-step-s76/pyspy_draft.py OUT_DIR [SECONDS] [K]"""

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine
from bench.policies import MAX_K, as_token_ids, drafter_settings
from moe_sglang.launch import FINE_DRAFT_MODEL, SpeculationConfig
from moe_sglang.server import running_engine

out = Path(sys.argv[1])
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
k = int(sys.argv[3]) if len(sys.argv) > 3 else 4
out.mkdir(parents=True, exist_ok=True)
model = Path("build/bench-models/moe-fine-x48")
spec = SpeculationConfig(
    "standalone", draft_model_path=str(FINE_DRAFT_MODEL), num_steps=MAX_K, topk=1, num_draft_tokens=MAX_K + 1
)
settings = dataclasses.replace(drafter_settings(), step_log=str(out / "steps.jsonl"))
prompts = as_token_ids(prompt_sets(24, 400), model, 256)["code"]
with running_engine(bench_engine(model, spec, 1, settings), out / "engine.log") as url:
    name = served_model(url)
    scheduler = next(
        p for p in psutil.Process().children(recursive=True) if "scheduler" in " ".join(p.cmdline()) + p.name()
    )
    hint = {"custom_params": {"moe_serve": {"policy": "static", "max_k": k}}}
    for p in prompts[:3]:
        complete(url, name, p, 8, hint)  # warm
    spy = subprocess.Popen(
        [".venv/bin/py-spy", "record", "--pid", str(scheduler.pid), "--rate", "500", "--nonblocking", "--format", "raw",
         "--output", str(out / f"k{k}.raw"), "--duration", str(int(seconds))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    end, sent = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        complete(url, name, prompts[sent % len(prompts)], 32, hint)
        sent += 1
    spy.wait()
    print(f"k{k} requests", sent, flush=True)
