"""Scratch A/B: arrival gather's idle rule, old (finished requests count as running) vs new; two plain synchronous
engines on moe-fine x48 up together, waves of 8 (run_batch at batch 8) alternating; prefill sizes from the logs."""

import contextlib
import json
import os
import re
import sys

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import as_token_ids
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

rounds = int(sys.argv[1])
paths = {"old": "/tmp/old", "new": "/work/main"}
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(16, 400), model, 96)["mixed"]
rows = []
with contextlib.ExitStack() as stack:
    urls = {}
    for name, path in paths.items():
        os.environ["PYTHONPATH"] = path
        cfg = bench_engine(model, SpeculationConfig(), 1, EngineSettings(), ("--disable-overlap-schedule",))
        urls[name] = stack.enter_context(running_engine(cfg, log_path=f"/tmp/scratch/gather-{name}.log"))
    for r in range(rounds):
        for name in list(paths) if r % 2 == 0 else list(paths)[::-1]:
            url = urls[name]
            flush_cache(url)
            res = run_batch(url, served_model(url), prompts, 32, 8, None)
            rows.append(
                dict(round=r, engine=name, tpot_ms=res["tpot_ms"], ttft_ms=res["ttft_ms"], e2e=res["e2e_per_token_ms"])
            )
            print(rows[-1], flush=True)
sizes = {}
for n in paths:
    with open(f"/tmp/scratch/gather-{n}.log") as log:
        sizes[n] = [int(x) for x in re.findall(r"#new-seq: (\d+)", log.read())]
print(sizes)
with open("/tmp/scratch/gather_ab.json", "w") as out:
    json.dump(dict(rows=rows, prefill_sizes=sizes), out, indent=1)
