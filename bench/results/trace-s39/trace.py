"""Scratch trace (39th session): moe-serve's per-request stats on the deciding engines (moe-fine x48), batch 1, 3 prompts
per task x 32 tokens, one request at a time: SGLang's scheduler steps (spec_verify_ct) against moe-serve's decode steps,
resting steps, speculative steps, judged positions. usage: python trace.py DRAFTERS [PLAIN_BURST] [TASKS] -> DRAFTERS.json"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())
from pathlib import Path

import httpx

from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import as_token_ids, speculation
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings
from moe_sglang.stats_output import META_KEY

drafters = sys.argv[1].split(",")
BURST = int(sys.argv[2]) if len(sys.argv) > 2 else 4
TASKS = sys.argv[3].split(",") if len(sys.argv) > 3 else None
setup = deciding_setup()
model = timed_model(setup)
texts = prompt_sets(3, 600)
prompts = as_token_ids(texts, model, 128)
rows = []
for drafter in drafters:
    cfg = bench_engine(model, speculation(drafter, setup), 1, EngineSettings(plain_burst=BURST))
    with running_engine(cfg, log_path=f"/tmp/trace-{drafter}.log") as url:
        for task, ps in prompts.items():
            if TASKS and task not in TASKS:
                continue
            for i, p in enumerate(ps):
                flush_cache(url)
                body = {
                    "input_ids": p,
                    "sampling_params": {
                        "max_new_tokens": 32,
                        "temperature": 0,
                        "ignore_eos": True,
                        "custom_params": {"moe_serve": {"policy": "moe-serve"}},
                    },
                }
                out = httpx.post(f"{url}/generate", json=body, timeout=600).json()
                st = out["meta_info"][META_KEY][0]
                row = dict(
                    drafter=drafter,
                    task=task,
                    prompt=i,
                    sched_steps=out["meta_info"].get("spec_verify_ct"),
                    decode_steps=st["num_decode_steps"],
                    resting=st["num_steps_resting"],
                    spec_steps=st["num_spec_steps"],
                    accepted=st["num_accepted_draft_tokens"],
                    shadow=st["num_shadow_drafts"],
                )
                rows.append(row)
                print(row, flush=True)
with open(Path(__file__).with_name(f"{sys.argv[1].replace(',', '-')}.json"), "w") as out:
    json.dump(rows, out, indent=1)
