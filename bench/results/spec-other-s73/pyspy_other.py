"""Scratch (73rd session): where a batch-1 speculative step's time outside the target's and the draft's forwards goes
(the step log's `other_ms`, ~1-1.6 ms at K = 1 against ~0.3 plain on an AMX Xeon, ../amx-b8-s73). A STANDALONE engine
on moe-fine x48 (bench.policies' drafter settings, one engine thread), code prompts one at a time for `SECONDS`
each at a static K = 1 and then at K = 0, py-spy recording the scheduler process meanwhile (raw stacks, 500 Hz);
the step log beside. usage: PYTHONPATH=. python bench/results/spec-other-s73/pyspy_other.py OUT_DIR [SECONDS]"""

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine
from bench.policies import as_token_ids, drafter_settings
from moe_sglang.launch import FINE_DRAFT_MODEL, SpeculationConfig
from moe_sglang.server import running_engine

out = Path(sys.argv[1])
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
out.mkdir(parents=True, exist_ok=True)
model = Path("build/bench-models/moe-fine-x48")
spec = SpeculationConfig("standalone", draft_model_path=str(FINE_DRAFT_MODEL), num_steps=3, topk=1, num_draft_tokens=4)
settings = dataclasses.replace(drafter_settings(), step_log=str(out / "steps.jsonl"))
prompts = as_token_ids(prompt_sets(24, 400), model, 256)["code"]
with running_engine(bench_engine(model, spec, 1, settings), out / "engine.log") as url:
    name = served_model(url)
    scheduler = next(
        p for p in psutil.Process().children(recursive=True) if "scheduler" in " ".join(p.cmdline()) + p.name()
    )
    for label, k in (("k1", 1), ("k0", 0)):
        hint = {"custom_params": {"moe_serve": {"policy": "static", "max_k": k}}}
        complete(url, name, prompts[0], 8, hint)  # warm
        spy = subprocess.Popen(
            [
                ".venv/bin/py-spy",
                "record",
                "--pid",
                str(scheduler.pid),
                "--rate",
                "500",
                "--format",
                "raw",
                "--output",
                str(out / f"{label}.raw"),
                "--duration",
                str(int(seconds)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end, sent = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            complete(url, name, prompts[sent % len(prompts)], 32, hint)
            sent += 1
        spy.wait()
        print(label, "requests", sent, flush=True)
