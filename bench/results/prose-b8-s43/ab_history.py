"""Scratch A/B (43rd session): moe-serve with its default parameters (OLD) and with policy parameters PARAMS (NEW, a
JSON object of MoeServePolicy arguments) on two fresh engines of DRAFTER (ngram, the default, or standalone) of the
deciding setup (moe-fine x48, 1 engine thread each), this checkout's code on both, after the same history: the cells
the deciding benchmark runs on a drafter engine before prose b8 (code b1, code b8, math b1, math b8, prose b1),
HISTORY_ROUNDS rounds each (0: none), every hinted policy of bench.policies with the run's SLO hints, the two engines
wave by wave. Then per round and task (TASKS at batch BATCH, 32 tokens; a wave of BATCH prompts, or at batch 1 three
prompts one after another, their mean TPOT): each engine under moe-serve and at the K = 0 hint (moe-serve / K = 0
cancels the engine instance's speed), pairs rotated per round.
usage: python ab_history.py ROUNDS PARAMS [HISTORY_ROUNDS] [BATCH] [TASKS] [OUT] [DRAFTER] -> OUT (default
ab-history.json)"""

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache  # noqa: E402
from bench._code_ab import engines_of, ms_over_k0, rotated_rounds, wave_tpot_ms  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._load import run_batch  # noqa: E402
from bench._models import deciding_setup, timed_model  # noqa: E402
from bench.policies import HINTED, K0, _hinted, as_token_ids, cell_prompts, speculation  # noqa: E402
from moe_sglang.settings import EngineSettings  # noqa: E402

rounds, params = int(sys.argv[1]), json.loads(sys.argv[2])
HISTORY_ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
BATCH = int(sys.argv[4]) if len(sys.argv) > 4 else 8
TASKS = tuple(sys.argv[5].split(",")) if len(sys.argv) > 5 else ("prose", "math", "code")
OUT = Path(sys.argv[6]) if len(sys.argv) > 6 else Path(__file__).with_name("ab-history.json")
DRAFTER = sys.argv[7] if len(sys.argv) > 7 else "ngram"
SLO = {1: 18.5, 8: 79.0}  # the SLO hints of the forty-third session's run (policies.json slo_tpot_ms)
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(8, 400), model, 128)
SETTINGS = {"old": EngineSettings(), "new": EngineSettings(policy_params_json=json.dumps({"moe-serve": params}))}
MS = _hinted(next(v for v in HINTED if v.name == "moe-serve"), SLO[BATCH])
VARIANTS = {"ms": MS, "k0": K0}


def tpot(url, served, task, hints):
    if BATCH == 1:  # one request at a time, the mean of their TPOTs
        return statistics.mean(wave_tpot_ms(url, served, [p], 32, hints) for p in prompts[task][: cell_prompts(1)])
    return wave_tpot_ms(url, served, prompts[task][: cell_prompts(BATCH)], 32, hints)


here = os.getcwd()
spec = speculation(DRAFTER, setup)
with engines_of({"old": here, "new": here}, model, spec, settings=SETTINGS) as engines:
    for n, (task, batch) in enumerate((("code", 1), ("code", 8), ("math", 1), ("math", 8), ("prose", 1))):
        for r in range(HISTORY_ROUNDS):
            for v in HINTED:
                for name in ("old", "new") if (n + r) % 2 == 0 else ("new", "old"):
                    url, served = engines[name]
                    flush_cache(url)
                    run_batch(url, served, prompts[task][: cell_prompts(batch)], 32, batch, _hinted(v, SLO[batch]))
        print("history", task, batch, flush=True)
    rows = rotated_rounds(engines, VARIANTS, TASKS, rounds, tpot)
summary = ms_over_k0(rows, TASKS, ("old", "new"), rounds)
print(json.dumps(summary, indent=1))
OUT.write_text(
    json.dumps(
        dict(
            drafter=DRAFTER,
            batch=BATCH,
            rounds=rounds,
            history_rounds=HISTORY_ROUNDS,
            params=params,
            summary=summary,
            rows=rows,
        ),
        indent=1,
    )
)
