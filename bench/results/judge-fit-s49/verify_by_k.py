"""Scratch (49th session): what a batch-1 step costs on the STANDALONE deciding engine (moe-fine x48, its dense draft)
by draft depth and outcome: static K = 0..4 (the engine drafts at most 3) on the bench's prose and code prompts (3
each, 32 tokens, 2 rounds), the step log's median target forward, draft and other ms per (K verified, drafts
accepted). usage: python verify_by_k.py > verify_by_k.txt"""

import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._load import run_batch, served_model  # noqa: E402
from bench._models import bench_engine, deciding_setup, timed_model  # noqa: E402
from bench.policies import as_token_ids, cell_prompts, speculation  # noqa: E402
from moe_sglang.server import running_engine  # noqa: E402
from moe_sglang.settings import EngineSettings  # noqa: E402
from moe_sglang.step_log import read  # noqa: E402

LOG = Path("/tmp/vcost/steps.jsonl")
LOG.unlink(missing_ok=True)
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(max(map(cell_prompts, (1, 8))), 400), model, 128)
config = bench_engine(model, speculation("standalone", setup), 1, EngineSettings(step_log=str(LOG)))
with running_engine(config, log_path="/tmp/vcost/engine.log") as url:
    name = served_model(url)
    for _ in range(2):
        for task in ("prose", "code"):
            for k in (0, 1, 2, 3, 4):
                for prompt in prompts[task][:3]:
                    flush_cache(url)
                    hint = {"custom_params": {"moe_serve": {"policy": "static", "max_k": k}}}
                    run_batch(url, name, [prompt], 32, 1, hint)
steps = [s for s in read(LOG) if len(s["rids"]) == 1]
by = {}
for s in steps:
    key = ("plain" if s["plain"] else f"K{s['verified'][0]}", None if s["plain"] else s["accepted"][0])
    by.setdefault(key, []).append(s)
for key in sorted(by, key=str):
    xs = by[key]
    parts = {name: statistics.median(x[f"{name}_ms"] for x in xs) for name in ("verify", "draft", "other")}
    print(key, len(xs), " ".join(f"{name} {ms:.2f}" for name, ms in parts.items()))
