"""Scratch A/B (41st session): moe-serve's rests before (OLD: 9fecd86) and after (NEW: rests of a batch end
together, 708adf5) on two fresh NGRAM engines of moe-fine x48 up together (1 engine thread each), waves of BATCH
held-out prompts x 32 tokens per task in the deciding bench's order (code, math, prose), engines and variants rotated
per round: each engine under moe-serve and at the K = 0 hint (its own floor; moe-serve / K = 0 cancels the engine
instance's speed). usage: python ab.py ROUNDS OLD_PATH NEW_PATH [BATCH] [TASKS] -> ab-bBATCH.json"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._code_ab import engines_of, ms_over_k0, rotated_rounds, wave_tpot_ms  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._models import deciding_setup, timed_model  # noqa: E402
from bench.policies import K0, as_token_ids, speculation  # noqa: E402

rounds, old, new = int(sys.argv[1]), sys.argv[2], sys.argv[3]
BATCH = int(sys.argv[4]) if len(sys.argv) > 4 else 8
TASKS = tuple(sys.argv[5].split(",")) if len(sys.argv) > 5 else ("code", "math", "prose")
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids({t: v for t, v in prompt_sets(BATCH, 600).items() if t in TASKS}, model, 128)
MS = {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}}
VARIANTS = {"ms": MS, "k0": K0}
with engines_of({"old": old, "new": new}, model, speculation("ngram", setup)) as engines:
    rows = rotated_rounds(
        engines,
        VARIANTS,
        TASKS,
        rounds,
        lambda url, served, task, hints: wave_tpot_ms(url, served, prompts[task], 32, hints),
    )
summary = ms_over_k0(rows, TASKS, ("old", "new"), rounds)
print(json.dumps(summary, indent=1))
out = Path(__file__).with_name(f"ab-b{BATCH}.json")
out.write_text(json.dumps(dict(batch=BATCH, rounds=rounds, old=old, new=new, summary=summary, rows=rows), indent=1))
