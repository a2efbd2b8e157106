"""Scratch (fiftieth session): what a batch-1 step costs on the STANDALONE deciding engine (moe-fine x48, its dense
draft) on this session's host, by draft depth and outcome, as judge-fit-s49/verify_by_k.py measured it on the
forty-ninth's: static K = 0, 1, 3 (the engine drafts at most 3) on the bench's prose and code prompts (3 each, 32
tokens), 3 rounds (the first warms the engine up; all are logged); the step log's median target forward, draft and
other ms per (K verified, drafts accepted) (K: the step log's `verified`).
usage: python bench/results/gate-reuse-s50/steps_by_k.py OUT_DIR 0,1,3 > bench/results/gate-reuse-s50/steps_by_k.txt"""

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

OUT = Path(sys.argv[1])
OUT.mkdir(parents=True, exist_ok=True)
KS = [int(k) for k in sys.argv[2].split(",")]
LOG = OUT / "steps.jsonl"
LOG.unlink(missing_ok=True)
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(max(map(cell_prompts, (1, 8))), 400), model, 128)
config = bench_engine(model, speculation("standalone", setup), 1, EngineSettings(step_log=str(LOG)))
with running_engine(config, log_path=str(OUT / "engine.log")) as url:
    name = served_model(url)
    for _ in range(3):
        for k in KS:
            for task in ("prose", "code"):
                for prompt in prompts[task][:3]:
                    flush_cache(url)
                    hint = {"custom_params": {"moe_serve": {"policy": "static", "max_k": k}}}
                    run_batch(url, name, [prompt], 32, 1, hint)
steps = [s for s in read(LOG) if len(s["rids"]) == 1]
by: dict[tuple, list[dict]] = {}
for s in steps:
    key = ("plain" if s["plain"] else f"K{s['verified'][0]}", None if s["plain"] else s["accepted"][0])
    by.setdefault(key, []).append(s)
for key in sorted(by, key=str):
    xs = by[key]
    parts = {n: statistics.median(x[f"{n}_ms"] for x in xs) for n in ("verify", "draft", "other")}
    print(key, len(xs), " ".join(f"{n} {ms:.2f}" for n, ms in parts.items()))
