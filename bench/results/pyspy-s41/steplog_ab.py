"""Scratch A/B (41st session): the NGRAM deciding engine (moe-fine x48) with MOE_SERVE_STEP_LOG serves the same
requests under two hints, moe-serve and K = 0, alternating per round; the step log, cut by each run's client-side
window (perf_counter is one monotonic clock for all processes), gives per hint: scheduler steps, decode forwards,
time inside steps and between them. usage: python steplog_ab.py [TASK] [BATCH] [ROUNDS] [OUT] [DRAFTER] [HINTS] -> OUT (default
steplog-TASK-bBATCH.json here; the forty-second session added OUT, the forty-third DRAFTER (ngram | standalone) and
HINTS (comma-separated from moe-serve, k0, static-1..4)); the step log is left in /tmp/steplog-TASK-BATCH.jsonl"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
from pathlib import Path

from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import as_token_ids, cell_prompts, speculation
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings
from moe_sglang.step_log import read

TASK = sys.argv[1] if len(sys.argv) > 1 else "math"
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
HERE = Path(__file__).parent
OUT = Path(sys.argv[4]) if len(sys.argv) > 4 else HERE / f"steplog-{TASK}-b{BATCH}.json"
DRAFTER = sys.argv[5] if len(sys.argv) > 5 else "ngram"
KNOWN = {
    "moe-serve": {"custom_params": {"moe_serve": {"policy": "moe-serve"}}},
    **{f"static-{k}": {"custom_params": {"moe_serve": {"policy": "static", "max_k": k}}} for k in range(1, 5)},
    "k0": {"custom_params": {"moe_serve": {"policy": "static", "max_k": 0}}},
}
HINTS = {name: KNOWN[name] for name in (sys.argv[6] if len(sys.argv) > 6 else "moe-serve,k0").split(",")}
LOG = Path(f"/tmp/steplog-{TASK}-{BATCH}.jsonl")
LOG.unlink(missing_ok=True)
setup = deciding_setup()
model = timed_model(setup)
# the prompts bench.policies draws (prompt_sets of its largest cell, 8): drawn for this batch alone, a batch-1 cell's
# prompts were other documents than the bench's (forty-sixth session: prose b1 drafts accepted 24 of 24 here, where the
# bench's prose b1 drafts did not pay)
prompts = as_token_ids(prompt_sets(max(map(cell_prompts, (1, 8))), 400), model, 128)[TASK][: cell_prompts(BATCH)]
config = bench_engine(model, speculation(DRAFTER, setup), 1, EngineSettings(step_log=str(LOG)))
runs = []
with running_engine(config, log_path=f"/tmp/steplog-{DRAFTER}.log") as url:
    name = served_model(url)
    for hint in HINTS.values():  # warm both paths
        flush_cache(url)
        run_batch(url, name, prompts[:1], 8, 1, hint)
    for r in range(ROUNDS):
        labels = list(HINTS)
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            # waves of BATCH requests, each after a flush of the corpus and prefix cache, as bench.policies'
            # measure_cell runs them (forty-sixth session: the 3 batch-1 requests had run as one wave, so the later
            # ones drafted from the earlier ones' output, which the bench's flushed corpus does not hold)
            t0 = time.perf_counter()
            parts = []
            for w in range(0, len(prompts), BATCH):
                flush_cache(url)
                parts.append(run_batch(url, name, prompts[w : w + BATCH], 32, BATCH, HINTS[label]))
            res = {"tpot_ms": sum(p["tpot_ms"] * p["requests"] for p in parts) / sum(p["requests"] for p in parts)}
            runs.append({"hint": label, "round": r, "t0": t0, "t1": time.perf_counter(), "tpot_ms": res["tpot_ms"]})
            print(label, r, f"{res['tpot_ms']:.1f} ms", flush=True)
steps = read(LOG)
summary = {}
for label in HINTS:
    per = []
    for run in (x for x in runs if x["hint"] == label):
        mine = [s for s in steps if run["t0"] <= s["start"] <= run["t1"]]
        sched = [s for i, s in enumerate(mine) if i == 0 or s["start"] != mine[i - 1]["end"]]  # burst forwards chain
        inside = sum(s["end"] - s["start"] for s in mine)
        gaps = [b["start"] - a["end"] for a, b in zip(mine, mine[1:], strict=False) if b["start"] != a["end"]]
        per.append(
            {
                "tpot_ms": run["tpot_ms"],
                "forwards": len(mine),
                "scheduler_steps": len(sched),
                "spec_steps": sum(not s["plain"] for s in mine),
                "inside_ms": inside * 1e3,
                "gap_ms_median": statistics.median(gaps) * 1e3 if gaps else None,
                "gap_ms_sum": sum(g for g in gaps if g < 0.2) * 1e3,  # gaps under 200 ms: not a prefill
                "draft_ms": sum(s["draft_ms"] for s in mine),
                "other_ms": sum(s["other_ms"] for s in mine),
                "verify_ms": sum(s["verify_ms"] for s in mine),
            }
        )
    summary[label] = per
    keys = [k for k in per[0] if k != "tpot_ms"]
    print(label, "tpot", [round(p["tpot_ms"], 1) for p in per])
    for k in keys:
        print(f"  {k:16s}", [None if p[k] is None else round(p[k], 2) for p in per])
OUT.write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))
