"""Scratch A/B (34th session, code at 7171e0d, when the draft's one-token forwards also took the op; 9ca720f took them
back to torch ops after this A/B): two STANDALONE engines up together on moe-fine x48 with its dense draft, the
default (decode attention sublayers of the target and of the draft's one-token forwards by the C++ op) and
`target_forward=torch-ops` (those sublayers as torch ops), requests at static K = 3 and under moe-serve, batch 1
(each held-out prompt alone) and batch 8 (8 prompts together), 32 tokens, engines in rotated order per round.
usage: python ab_standalone.py ROUNDS -> ab_standalone.json beside this file"""

import contextlib
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import as_token_ids, speculation
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

rounds = int(sys.argv[1])
setup = deciding_setup()
model = timed_model(setup)
texts = prompt_sets(8, 400)
prompts = {task: as_token_ids({task: texts[task]}, model, 128)[task] for task in ("code", "prose")}
HINTS = {
    "static-3": {"custom_params": {"moe_serve": {"policy": "static", "max_k": 3, "tenant": "bench"}}},
    "moe-serve": {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}},
}
ENGINES = {"op": EngineSettings(), "torch-ops": replace(EngineSettings(), target_forward="torch-ops")}

with contextlib.ExitStack() as stack:
    urls = {
        name: stack.enter_context(
            running_engine(
                bench_engine(model, speculation("standalone", setup), 1, settings), log_path=f"/tmp/ab-{name}.log"
            )
        )
        for name, settings in ENGINES.items()
    }
    served = {name: served_model(url) for name, url in urls.items()}
    rows = []
    for r in range(rounds):
        order = list(ENGINES)[r % 2 :] + list(ENGINES)[: r % 2]
        for task, task_prompts in prompts.items():
            for hint_name, hint in HINTS.items():
                for batch in (1, 8):
                    cases = [[p] for p in task_prompts[:3]] if batch == 1 else [task_prompts[:8]]
                    for c_i, case in enumerate(cases):
                        for name in order:
                            flush_cache(urls[name])
                            out = run_batch(urls[name], served[name], case, 32, batch, hint)
                            rows.append(
                                dict(
                                    round=r,
                                    task=task,
                                    hint=hint_name,
                                    batch=batch,
                                    case=c_i,
                                    engine=name,
                                    tpot_ms=out["tpot_ms"],
                                )
                            )
                            print(r, task, hint_name, batch, c_i, name, round(out["tpot_ms"], 2), flush=True)
    summary = {}
    for task in prompts:
        for hint_name in HINTS:
            for batch in (1, 8):
                key = (task, hint_name, batch)
                op, torch_ops = (
                    [x["tpot_ms"] for x in rows if (x["task"], x["hint"], x["batch"], x["engine"]) == (*key, e)]
                    for e in ("op", "torch-ops")
                )
                ratios = [a / b for a, b in zip(op, torch_ops, strict=True)]
                summary[f"{task} {hint_name} b{batch}"] = dict(
                    op_tpot_ms=statistics.median(op),
                    torch_ops_tpot_ms=statistics.median(torch_ops),
                    op_over_torch_ops_median=statistics.median(ratios),
                    min=min(ratios),
                    max=max(ratios),
                    n=len(ratios),
                )
                print(
                    task, hint_name, batch, {k: round(v, 3) for k, v in summary[f"{task} {hint_name} b{batch}"].items()}
                )
    Path(__file__).with_name("ab_standalone.json").write_text(
        json.dumps({"method": __doc__, "rows": rows, "op_over_torch_ops": summary}, indent=1)
    )
