"""Scratch (49th session): the plain engine and the NGRAM engine at a K = 0 hint (and a second of each, or the plain
engine without overlap, or NGRAM without plain bursts) up together on moe-fine x48, waves of 8 (BATCH) mixed prompts x
64 tokens in rotated order, bench.spec_overhead's timed_run per wave; then each engine's in-engine decode counters
(sitecustomize.py beside this file). usage: PYTHONPATH=<this folder> python k0_b8.py ROUNDS plain,ngram[,plain2,ngram2]"""

import contextlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._heldout import prompt_sets
from bench._models import deciding_setup, timed_model
from bench.policies import as_token_ids
from bench.spec_overhead import K0, engine, speculation, timed_run
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
variants = sys.argv[2].split(",") if len(sys.argv) > 2 else ["plain", "ngram"]
batch = int(os.environ.get("BATCH", "8"))
model = timed_model(deciding_setup())
prompts = as_token_ids(prompt_sets(16, 400), model, 96)["mixed"]
cfgs = {
    "plain": (engine(model, SpeculationConfig("none"), "ragged", 1), None),
    "plain-sync": (engine(model, SpeculationConfig("none"), "ragged", 1, ("--disable-overlap-schedule",)), None),
    "ngram": (engine(model, speculation("ngram", None), "ragged", 1), K0),
    "plain2": (engine(model, SpeculationConfig("none"), "ragged", 1), None),
    "ngram2": (engine(model, speculation("ngram", None), "ragged", 1), K0),
    "ngram-b1": (engine(model, speculation("ngram", None), "ragged", 1, burst=1), K0),
}
rows = []
with contextlib.ExitStack() as stack:
    urls = {}
    for v in variants:
        os.environ["INST_OUT"] = f"/tmp/k0b8/inst-{v}.json"
        urls[v] = stack.enter_context(running_engine(cfgs[v][0], log_path=f"/tmp/k0b8/engine-{v}.log"))
    os.environ.pop("INST_OUT")
    for r in range(rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            res = timed_run(urls[v], prompts, 64, batch, cfgs[v][1])
            rows.append(
                {
                    "variant": v,
                    "round": r,
                    **{k: res[k] for k in ("tpot_ms", "ttft_ms", "e2e_per_token_ms", "wall_s", "cpu_ms_per_token")},
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    time.sleep(1)
for v in variants:
    acc = json.loads(Path(f"/tmp/k0b8/inst-{v}.json").read_text())
    for bs, (iters, nf, wall, fw) in acc.items():
        print(
            f"{v} bs={bs} iters={iters} forwards={nf} wall/token={wall / nf * 1e3:.2f}ms fwd/token={fw / nf * 1e3:.2f}ms outside/token={(wall - fw) / nf * 1e3:.2f}ms"
        )
