"""Scratch (77th session; oracle-s76/run.py with this folder's variants): bench.policies' STANDALONE batch-1 cells (the same prompts: prompt_sets(8, 400)'s first
three per task, 128 prompt tokens, 32 greedy tokens) under none (the plain overlap engine), k0 and static K = 1..4
and moe-serve on the STANDALONE engine, which writes its step log; each request's policy, task, prompt and client
window (perf_counter: the step log's clock) go to requests.jsonl, so the log's steps can be cut per request.
usage: PYTHONPATH=bench/results/accept-head-s77/variants:. python bench/results/accept-head-s77/run.py OUT_DIR ROUNDS [POLICIES]"""

import dataclasses
import json
import sys
import time
from pathlib import Path

from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, inflated
from bench.policies import MAX_K, PROMPT_TOKENS, as_token_ids, drafter_settings
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

TOKENS = 32
out, rounds = Path(sys.argv[1]), int(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
setup = deciding_setup()
model = inflated(setup.model, Path("build/bench-models/moe-fine-x48"), setup.inflate)
spec = SpeculationConfig(
    "standalone", draft_model_path=str(setup.draft_model), num_steps=MAX_K, topk=1, num_draft_tokens=MAX_K + 1
)
settings = dataclasses.replace(drafter_settings(), step_log=str(out / "steps.jsonl"))
texts = prompt_sets(8, 400)
prompts = as_token_ids({t: texts[t] for t in ("code", "math", "prose")}, model, min(PROMPT_TOKENS, 256 - TOKENS - 1))
policies = {"none": None, "k0": {"policy": "static", "max_k": 0}, "moe-serve": {"policy": "moe-serve"}}
policies |= {f"static-{k}": {"policy": "static", "max_k": k} for k in range(1, MAX_K + 1)}
if (
    len(sys.argv) > 3
):  # a subset, with the scratch variants of variants/ (PYTHONPATH=bench/results/accept-head-s77/variants:.)
    known = policies | {v: {"policy": v} for v in ("static-margin", "static-head", "moe-serve-margin")}
    policies = {name: known[name] for name in sys.argv[3].split(",")}
with (
    running_engine(bench_engine(model, SpeculationConfig(), 1, EngineSettings()), out / "engine-none.log") as plain,
    running_engine(bench_engine(model, spec, 1, settings), out / "engine-standalone.log") as drafter,
    open(out / "requests.jsonl", "w") as log,
):
    names = {url: served_model(url) for url in (plain, drafter)}
    for url in (plain, drafter):  # warm
        complete(url, names[url], prompts["code"][0], 8)
    order = list(policies)
    for r in range(rounds):
        for task in ("code", "math", "prose"):
            for i, prompt in enumerate(prompts[task][:3]):
                for j in range(len(order)):
                    name = order[(j + r + i) % len(order)]
                    hint = policies[name]
                    url = plain if hint is None else drafter
                    extra = None if hint is None else {"custom_params": {"moe_serve": hint}}
                    start = time.perf_counter()
                    c = complete(url, names[url], prompt, TOKENS, extra)
                    row = {
                        "round": r,
                        "task": task,
                        "prompt": i,
                        "policy": name,
                        "start": start,
                        "end": time.perf_counter(),
                        "tpot_ms": c.tpot_s * 1e3,
                        "ttft_ms": c.ttft_s * 1e3,
                    }
                    log.write(json.dumps(row) + "\n")
                    log.flush()
        print("round", r, "done", flush=True)
