"""Scratch (54th session): one plain synchronous engine on moe-fine x48 with arrival_sitecustomize.py loaded; three
lone requests, then waves of 8 math prompts; the client's submit times go to the same log. Usage: cp
arrival_sitecustomize.py DIR/sitecustomize.py; ARRIVAL_LOG=/tmp/a.jsonl PYTHONPATH=DIR:. python arrival_times.py
WAVES"""

import concurrent.futures
import json
import os
import sys
import time
from pathlib import Path

from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import PROMPT_TOKENS, as_token_ids
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings


def submit(url: str, model: str, prompt: list[int], label: str):
    with open(os.environ["ARRIVAL_LOG"], "a") as f:
        f.write(json.dumps({"t": time.time(), "pid": os.getpid(), "ev": "submit", "label": label}) + "\n")
    return complete(url, model, prompt, 32)


def main() -> None:
    waves = int(sys.argv[1])
    model = timed_model(deciding_setup())
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["math"][:8]
    cfg = bench_engine(model, SpeculationConfig(), 1, EngineSettings(), ("--disable-overlap-schedule",))
    with running_engine(cfg, log_path=Path(os.environ["ARRIVAL_LOG"] + ".engine.log")) as url:
        served = served_model(url)
        for i in range(3):
            submit(url, served, prompts[i], f"lone{i}")
        for w in range(waves):
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                done = list(pool.map(submit, [url] * 8, [served] * 8, prompts, [f"wave{w}"] * 8))
            print(w, f"tpot {sum(c.tpot_s for c in done) / 8 * 1e3:.1f} ms", flush=True)


main()
