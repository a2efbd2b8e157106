"""Scratch trace (43rd session): does an NGRAM engine's history decide moe-serve's prose batch-8 cell? One fresh NGRAM
engine of the deciding setup (moe-fine x48, 1 thread) with the step log; first the cells the deciding benchmark runs on
that engine before prose b8 (code b1, code b8, math b1, math b8, prose b1), one round each, every hinted policy of
bench.policies in turn with its SLO hint as the run gives it; then prose b8 for ROUNDS rounds (moe-serve, static-2,
K = 0 in rotated order). usage: python replay_history.py [ROUNDS] [OUT] [SKIP] [HISTORY_ROUNDS] -> OUT (default history.json
here); SKIP=1 skips the history (a fresh engine's prose b8, for comparison); HISTORY_ROUNDS (default 1) rounds of each
earlier cell, 3 as in the deciding run. The engine gets --speculative-adaptive as the deciding run's drafter engines. The step log is left at
/tmp/steplog-history.jsonl."""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._load import run_batch, served_model  # noqa: E402
from bench._models import bench_engine, deciding_setup, timed_model  # noqa: E402
from bench.policies import HINTED, _hinted, as_token_ids, cell_prompts, speculation  # noqa: E402
from moe_sglang.server import running_engine  # noqa: E402
from moe_sglang.settings import EngineSettings  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
OUT = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).with_name("history.json")
SKIP = len(sys.argv) > 3 and sys.argv[3] == "1"
HISTORY_ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 1
SLO = {1: 18.5, 8: 79.0}  # the SLO hints of the forty-third session's run (policies.json slo_tpot_ms)
LOG = Path("/tmp/steplog-history.jsonl")
LOG.unlink(missing_ok=True)
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(8, 400), model, 128)
config = bench_engine(
    model, speculation("ngram", setup), 1, EngineSettings(step_log=str(LOG)), extra=("--speculative-adaptive",)
)
hints = {v.name: v for v in HINTED}
runs = []
with running_engine(config, log_path="/tmp/history-ngram.log") as url:
    served = served_model(url)
    if not SKIP:
        for task, batch in (("code", 1), ("code", 8), ("math", 1), ("math", 8), ("prose", 1)):
            for _ in range(HISTORY_ROUNDS):
                for v in HINTED:
                    flush_cache(url)
                    run_batch(url, served, prompts[task][: cell_prompts(batch)], 32, batch, _hinted(v, SLO[batch]))
            print("history", task, batch, flush=True)
    labels = ["moe-serve", "static-2", "k0"]
    for r in range(ROUNDS):
        for label in labels[r % 3 :] + labels[: r % 3]:
            hint = (
                {"custom_params": {"moe_serve": {"policy": "static", "max_k": 0}}}
                if label == "k0"
                else _hinted(hints[label], SLO[8])
            )
            flush_cache(url)
            t0 = time.perf_counter()
            res = run_batch(url, served, prompts["prose"][:8], 32, 8, hint)
            runs.append({"hint": label, "round": r, "t0": t0, "t1": time.perf_counter(), "tpot_ms": res["tpot_ms"]})
            print(label, r, f"{res['tpot_ms']:.1f} ms", flush=True)
OUT.write_text(json.dumps({"skip_history": SKIP, "history_rounds": HISTORY_ROUNDS, "runs": runs}, indent=1))
