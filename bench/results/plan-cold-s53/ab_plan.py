"""Scratch A/B of the fifty-third session (README, issue 15): the same plain engine on moe-fine x48 with two GEMM
plans, up together, 1 thread each, rounds alternating: A = the plan the timer of 8 matrices a pass tuned at the
session's first engine start (plans-8-matrices), B = the plan the timer from memory tuned (small_gemm.timed_matrices,
plans-timed-cold). TPOT as bench.decode_peer measures it (two output lengths, 8 and 168), batch 1 and 8. Run from
the repository root: PYTHONPATH=. .venv/bin/python bench/results/plan-cold-s53/ab_plan.py OUT [ROUNDS]"""

import json
import os
import statistics
import sys
from pathlib import Path

from bench._heldout import prompt_sets
from bench.decode_peer import PROMPT_TOKENS, decode_tpot_ms
from bench.policies import as_token_ids
from moe_sglang.launch import EngineConfig
from moe_sglang.server import running_engine

MODEL = Path("build/bench-models/moe-fine-x48")
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
here = Path(__file__).parent
plans = {"A": here / "plans-8-matrices", "B": here / "plans-timed-cold"}
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
prompts = as_token_ids(prompt_sets(8, 400), MODEL, PROMPT_TOKENS)["mixed"]
urls = {}
stack = []
for name, folder in plans.items():
    os.environ["MOE_SERVE_PLAN_DIR"] = str(folder.resolve())
    ctx = running_engine(EngineConfig(model_path=str(MODEL), port=0, threads=1), out / f"engine-{name}.log")
    urls[name] = ctx.__enter__()
    stack.append(ctx)
rows = []
try:
    for batch in (1, 8):
        for round_ in range(rounds):
            order = ["A", "B"] if round_ % 2 == 0 else ["B", "A"]
            got = {n: decode_tpot_ms(urls[n], MODEL.name, prompts[:batch], 8, 168) for n in order}
            rows.append({"batch": batch, "round": round_, **got})
            print(rows[-1], flush=True)
finally:
    for ctx in reversed(stack):
        ctx.__exit__(None, None, None)
summary = {
    b: {
        "A_ms": statistics.median(r["A"] for r in rows if r["batch"] == b),
        "B_ms": statistics.median(r["B"] for r in rows if r["batch"] == b),
        "B_over_A": sorted(round(r["B"] / r["A"], 3) for r in rows if r["batch"] == b),
    }
    for b in (1, 8)
}
print(json.dumps(summary, indent=1))
(out / "ab_plan.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
