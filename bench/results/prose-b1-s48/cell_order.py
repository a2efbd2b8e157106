"""Scratch diagnosis (48th session): moe-serve on the STANDALONE deciding engine (moe-fine x48, its dense draft) at
batch 1, the bench's held-out prompts (3 a cell, 32 tokens, corpus and prefix cache flushed per request), cells in
the order bench.policies serves them on one engine (prose first once, then code, math, prose, static K = 4 on prose,
prose again), with the step log; per run: TPOT, steps, speculative steps and their K, judged steps and their
outcomes ([drafts judged, accepted] per position), accepted drafts. usage: python cell_order.py > cell_order.txt;
CELL_ORDER_PARAMS='{"moe-serve": {"judge_gate": false}}' (EngineSettings.policy_params_json) for policy parameters"""

import os
import sys
import time
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

LOG = Path("/tmp/cell-order-steps.jsonl")
LOG.unlink(missing_ok=True)
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(max(map(cell_prompts, (1, 8))), 400), model, 128)
HINTS = {
    "moe-serve": {"custom_params": {"moe_serve": {"policy": "moe-serve"}}},
    "static-4": {"custom_params": {"moe_serve": {"policy": "static", "max_k": 4}}},
}
ORDER = [("prose", "moe-serve"), ("code", "moe-serve"), ("math", "moe-serve"), ("prose", "moe-serve")]
ORDER += [("prose", "static-4"), ("prose", "moe-serve")]
runs = []
config = bench_engine(
    model,
    speculation("standalone", setup),
    1,
    EngineSettings(step_log=str(LOG), policy_params_json=os.environ.get("CELL_ORDER_PARAMS", "")),
)
with running_engine(config, log_path="/tmp/cell-order-engine.log") as url:
    name = served_model(url)
    for task, hint in ORDER:
        start, parts = time.perf_counter(), []
        for prompt in prompts[task][: cell_prompts(1)]:
            flush_cache(url)
            parts.append(run_batch(url, name, [prompt], 32, 1, HINTS[hint]))
        runs.append((task, hint, start, time.perf_counter(), sum(p["tpot_ms"] for p in parts) / len(parts)))
steps = read(LOG)
for task, hint, start, end, tpot in runs:
    mine = [s for s in steps if start <= s["start"] <= end]
    spec = [s for s in mine if not s["plain"]]
    judged = [s["shadow"] for s in mine if s["shadow"]]
    accepted = sum(sum(s["accepted"]) for s in spec)
    print(
        f"{task} {hint}: TPOT {tpot:.2f} ms, {len(mine)} steps, {len(spec)} speculative (K {[s['k'][0] for s in spec]}),"
    )
    print(f"  {len(judged)} judged {judged}, {accepted} drafts accepted")
