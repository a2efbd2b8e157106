"""Scratch A/B (57th session): the STANDALONE drafter engine with its draft thread off and on (draft_thread.py) on
moe-fine x48, two engines of this checkout up together (1 engine thread each), each request under moe-serve and at
the K = 0 hint (its own floor); the held-out prompts (128 tokens) x 32 tokens per task in the deciding bench's order,
engines and variants rotated per round. Batch 1: the task's BATCH prompts one at a time (mean TPOT); batch > 1: sent
together. usage: python ab.py ROUNDS BATCH [TASKS] -> ab-bBATCH.json, steps-{off,on}-bBATCH.jsonl"""

import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._code_ab import engines_of, ms_over_k0, rotated_rounds, wave_tpot_ms  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._models import deciding_setup, timed_model  # noqa: E402
from bench.policies import K0, as_token_ids, drafter_settings, speculation  # noqa: E402

rounds, BATCH = int(sys.argv[1]), int(sys.argv[2])
TASKS = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("code", "math", "prose")
here = Path(__file__).parent
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids({t: v for t, v in prompt_sets(8, 600).items() if t in TASKS}, model, 128)
MS = {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}}
VARIANTS = {"ms": MS, "k0": K0}
settings = {}
for name in ("off", "on"):
    log = here / f"steps-{name}-b{BATCH}.jsonl"
    log.unlink(missing_ok=True)
    settings[name] = dataclasses.replace(drafter_settings(), draft_thread=name, step_log=str(log))


def measure(url, served, task, hints):
    if BATCH == 1:
        return statistics.mean(wave_tpot_ms(url, served, [p], 32, hints) for p in prompts[task])
    return wave_tpot_ms(url, served, prompts[task][:BATCH], 32, hints)


paths = {"off": os.getcwd(), "on": os.getcwd()}
with engines_of(paths, model, speculation("standalone", setup), settings=settings) as engines:
    rows = rotated_rounds(engines, VARIANTS, TASKS, rounds, measure)
summary = ms_over_k0(rows, TASKS, ("off", "on"), rounds)
for task in TASKS:
    for name in ("off", "on"):
        ms = [x["tpot_ms"] for x in rows if (x["task"], x["engine"], x["variant"]) == (task, name, "ms")]
        summary[task][f"{name}_ms_tpot_median"] = statistics.median(ms)
    on_off = [
        next(x["tpot_ms"] for x in rows if (x["task"], x["engine"], x["variant"], x["round"]) == (task, "on", "ms", r))
        / next(
            x["tpot_ms"] for x in rows if (x["task"], x["engine"], x["variant"], x["round"]) == (task, "off", "ms", r)
        )
        for r in range(rounds)
    ]
    summary[task]["ms_on_over_off_rounds"] = on_off
print(json.dumps(summary, indent=1))
(here / f"ab-b{BATCH}.json").write_text(
    json.dumps(dict(batch=BATCH, rounds=rounds, summary=summary, rows=rows), indent=1)
)
