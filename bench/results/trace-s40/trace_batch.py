"""Scratch trace (fortieth session): moe-serve's per-request stats on a deciding engine (moe-fine x48) for one wave of
BATCH requests sent together (as bench.policies' batch-8 cells do, 32 tokens each), per task: SGLang's scheduler steps
(spec_verify_ct) against moe-serve's decode steps, resting steps, speculative steps, accepted drafts, judged positions.
usage: python bench/results/trace-s40/trace_batch.py DRAFTER [BATCH] [TASKS] [POLICY|k0] [WAVES] -> printed rows"""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.getcwd())

import httpx

from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import as_token_ids, speculation
from moe_sglang.server import running_engine
from moe_sglang.stats_output import META_KEY

drafter = sys.argv[1]
assert drafter in ("ngram", "standalone"), drafter
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 8
TASKS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["code", "math", "prose"]
POLICY = sys.argv[4] if len(sys.argv) > 4 else "moe-serve"
WAVES = int(sys.argv[5]) if len(sys.argv) > 5 else 2
HINTS = {"policy": "static", "max_k": 0} if POLICY == "k0" else {"policy": POLICY}  # k0: bench.policies' K0 hint
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(BATCH, 600), model, 128)
cfg = bench_engine(model, speculation(drafter, setup), BATCH)


def one(url: str, p: list[int]) -> dict:
    body = {
        "input_ids": p,
        "sampling_params": {
            "max_new_tokens": 32,
            "temperature": 0,
            "ignore_eos": True,
            "custom_params": {"moe_serve": HINTS},
        },
    }
    return httpx.post(f"{url}/generate", json=body, timeout=900).json()["meta_info"]


with running_engine(cfg, log_path=f"/tmp/trace-batch-{drafter}.log") as url:
    for task in TASKS:
        for wave in range(WAVES):  # the first wave also warms the engine up for the task
            flush_cache(url)
            with ThreadPoolExecutor(BATCH) as pool:
                metas = list(pool.map(lambda p: one(url, p), prompts[task][:BATCH]))
            for i, m in enumerate(metas):
                st = m[META_KEY][0]
                row = dict(
                    task=task,
                    wave=wave,
                    request=i,
                    sched_steps=m.get("spec_verify_ct"),
                    decode_steps=st["num_decode_steps"],
                    resting=st["num_steps_resting"],
                    spec_steps=st["num_spec_steps"],
                    accepted=st["num_accepted_draft_tokens"],
                    shadow=st["num_shadow_drafts"],
                )
                print(json.dumps(row), flush=True)
