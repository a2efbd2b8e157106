"""Scratch A/B (37th session): two synchronous plain engines on moe-fine x48 (SGLang's overlap scheduler off, as a
speculative step runs), the arrival gather on (default, 100 ms) and off (0), waves of 8 requests of each task and
single requests, rounds interleaved by bench._cell.measure_cell; the overlap-scheduled plain engine beside them.

    PYTHONPATH=. .venv/bin/python bench/results/arrival-gather-s37/ab.py
"""

import contextlib
import json
import os
import statistics
from pathlib import Path

from bench._cell import measure_cell
from bench._heldout import prompt_sets
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import PROMPT_TOKENS, as_token_ids
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

HERE = Path(__file__).parent
ORDER = os.environ.get("ORDER", "")  # "swapped": engines started in the reverse order (an engine's own speed varies)
ROUNDS, TOKENS = 4, 32
SYNC = ("--disable-overlap-schedule",)

model = timed_model(deciding_setup())
prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)
engines = {
    "sync-gather": (EngineSettings(), SYNC),
    "sync-no-gather": (EngineSettings(arrival_gather_ms=0.0), SYNC),
    "overlap-gather": (EngineSettings(), ()),
}
if ORDER == "swapped":
    engines = dict(reversed(engines.items()))
rows = []
with contextlib.ExitStack() as stack:
    urls = {
        name: stack.enter_context(
            running_engine(
                bench_engine(model, SpeculationConfig(), 1, settings=s, extra=x), log_path=HERE / f"{name}{ORDER}.log"
            )
        )
        for name, (s, x) in engines.items()
    }
    for task in ("code", "math", "prose"):
        for batch, count in ((8, 8), (1, 3)):
            runs = measure_cell({n: (u, None) for n, u in urls.items()}, prompts[task][:count], TOKENS, batch, ROUNDS)
            for name, results in runs.items():
                row = {"task": task, "batch": batch, "engine": name}
                for key in ("tpot_ms", "ttft_ms", "e2e_per_token_ms", "itl_ms"):
                    row[key] = statistics.median(r[key] for r in results)
                    row[f"{key}_rounds"] = [r[key] for r in results]
                rows.append(row)
                print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items() if "rounds" not in k})
(HERE / f"ab{'-' + ORDER if ORDER else ''}.json").write_text(
    json.dumps({"model": str(model), "rounds": ROUNDS, "tokens": TOKENS, "rows": rows}, indent=1)
)
