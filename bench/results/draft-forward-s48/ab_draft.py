"""Scratch A/B (48th session): two STANDALONE engines on the deciding setup (moe-fine x48, its dense draft) up
together, draft_forward=direct (one-token forwards' attention by the C++ decode op, bfloat16-exact MLP and LM head
weights) and draft_forward=torch-ops (the direct forward as before: torch ops, float32), each with the step log, serve
the same held-out prompts under the same hints, engines in rotated order per round; per run: client TPOT and, from the
engine's step log cut by the run's window, the draft time per speculative step and per draft forward-equivalent.
usage: python ab_draft.py ROUNDS CELLS -> ab_draft.json beside this file; CELLS like prose:1,code:1,prose:8;
AB_TARGET_TORCH=1 (below) -> ab_chain.json"""

import contextlib
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

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
CELLS = [(t, int(b)) for t, b in (c.split(":") for c in (sys.argv[2] if len(sys.argv) > 2 else "prose:1").split(","))]
HERE = Path(__file__).parent
HINTS = {
    "static-3": {"custom_params": {"moe_serve": {"policy": "static", "max_k": 3}}},
    "moe-serve": {"custom_params": {"moe_serve": {"policy": "moe-serve"}}},
}
ENGINES = ("direct", "torch-ops")
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(max(map(cell_prompts, (1, 8))), 400), model, 128)
logs = {e: Path(f"/tmp/ab-draft-{e}.jsonl") for e in ENGINES}
for log in logs.values():
    log.unlink(missing_ok=True)
# AB_TARGET_TORCH=1: the torch-ops engine's target forward in torch ops too (its verify's attention sublayers; the
# chain op's A/B), and static K = 3 only
TARGET_TORCH = os.environ.get("AB_TARGET_TORCH") == "1"
if TARGET_TORCH:
    HINTS.pop("moe-serve")
configs = {
    e: bench_engine(
        model,
        speculation("standalone", setup),
        1,
        EngineSettings(
            step_log=str(logs[e]),
            draft_forward=e,
            target_forward="torch-ops" if TARGET_TORCH and e != "direct" else "direct",
        ),
    )
    for e in ENGINES
}
runs = []
with contextlib.ExitStack() as stack:
    urls = {e: stack.enter_context(running_engine(c, log_path=f"/tmp/ab-draft-{e}.log")) for e, c in configs.items()}
    for url in urls.values():  # warm
        for hint in HINTS.values():
            flush_cache(url)
            run_batch(url, served_model(url), prompts["prose"][:1], 8, 1, hint)
    for r in range(ROUNDS):
        for task, batch in CELLS:
            cell = prompts[task][: cell_prompts(batch)]
            for hint_name, hint in HINTS.items():
                order = list(ENGINES) if (r + len(runs)) % 2 == 0 else list(ENGINES)[::-1]
                for e in order:
                    url = urls[e]
                    t0, parts = time.perf_counter(), []
                    for w in range(0, len(cell), batch):
                        flush_cache(url)
                        parts.append(run_batch(url, served_model(url), cell[w : w + batch], 32, batch, hint))
                    tpot = sum(p["tpot_ms"] * p["requests"] for p in parts) / sum(p["requests"] for p in parts)
                    runs.append({"engine": e, "task": task, "batch": batch, "hint": hint_name, "round": r,
                                 "t0": t0, "t1": time.perf_counter(), "tpot_ms": tpot})  # fmt: skip
                    print(e, task, batch, hint_name, r, f"{tpot:.2f} ms", flush=True)
steps = {e: read(logs[e]) for e in ENGINES}
for run in runs:
    mine = [s for s in steps[run["engine"]] if run["t0"] <= s["start"] <= run["t1"]]
    spec = [s for s in mine if not s["plain"]]
    run["spec_steps"] = len(spec)
    run["draft_ms_per_spec_step"] = statistics.mean(s["draft_ms"] for s in spec) if spec else None
    run["verify_ms_per_spec_step"] = statistics.mean(s["verify_ms"] for s in spec) if spec else None
    run["other_ms_per_spec_step"] = statistics.mean(s["other_ms"] for s in spec) if spec else None
    run["step_ms_per_spec_step"] = statistics.mean(s["end"] - s["start"] for s in spec) * 1e3 if spec else None
summary = []
for task, batch in CELLS:
    for hint in HINTS:
        row = {"task": task, "batch": batch, "hint": hint}
        for key in (
            "tpot_ms",
            "draft_ms_per_spec_step",
            "verify_ms_per_spec_step",
            "step_ms_per_spec_step",
            "spec_steps",
        ):
            for e in ENGINES:
                vals = [
                    x[key] for x in runs if (x["engine"], x["task"], x["batch"], x["hint"]) == (e, task, batch, hint)
                ]
                vals = [v for v in vals if v is not None]
                row[f"{key}:{e}"] = round(statistics.median(vals), 2) if vals else None
        ratios = []
        for r in range(ROUNDS):
            pair = {x["engine"]: x["tpot_ms"] for x in runs
                    if (x["task"], x["batch"], x["hint"], x["round"]) == (task, batch, hint, r)}  # fmt: skip
            ratios.append(pair["direct"] / pair["torch-ops"])
        row["tpot_ratio_median"], row["tpot_ratio_min"], row["tpot_ratio_max"] = (
            round(statistics.median(ratios), 3), round(min(ratios), 3), round(max(ratios), 3))  # fmt: skip
        summary.append(row)
        print(row, flush=True)
out = {"method": __doc__, "cpu": os.popen("lscpu | grep 'Model name'").read().strip(), "runs": runs, "summary": summary}
(HERE / ("ab_chain.json" if TARGET_TORCH else "ab_draft.json")).write_text(json.dumps(out, indent=1))
