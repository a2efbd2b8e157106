"""Scratch A/B (fortieth session; the change was reverted after it, bench/results/trace-s40/README.md): the cost
model's error where a batch size's speculative steps are priced by its plain steps' ratio (StepTimeModel.error:
|log ratio| until they are calibrated; before, none, so moe-serve's margin was MIN_MARGIN's 1 %). Two speculative
engines of one drafter up together on moe-fine x48, fresh (PYTHONPATH per engine: OLD = the code before, NEW = with
it), one wave of BATCH held-out prompts per task x 32 tokens sent together, tasks in the deciding bench's order (code,
math, prose), engines and variants rotated per round: each engine under moe-serve and at the K = 0 hint (the engine's
own floor; moe-serve / K = 0 cancels the engine instance's speed).
usage: python ab.py DRAFTER ROUNDS OLD_PATH NEW_PATH [BATCH] -> ab-DRAFTER.json"""

import contextlib
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._load import complete, served_model  # noqa: E402
from bench._models import bench_engine, deciding_setup, timed_model  # noqa: E402
from bench.policies import K0, as_token_ids, speculation  # noqa: E402
from moe_sglang.server import running_engine  # noqa: E402

drafter, rounds, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
BATCH = int(sys.argv[5]) if len(sys.argv) > 5 else 8
TASKS = ("code", "math", "prose")
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids({t: v for t, v in prompt_sets(BATCH, 600).items() if t in TASKS}, model, 128)
MS = {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}}
here = Path(__file__).parent

rows = []
with contextlib.ExitStack() as stack:
    engines = {}
    for name, path in (("old", old), ("new", new)):
        os.environ["PYTHONPATH"] = path
        cfg = bench_engine(model, speculation(drafter, setup), BATCH)
        url = stack.enter_context(running_engine(cfg, log_path=f"/tmp/margin-{drafter}-{name}.log"))
        engines[name] = (url, served_model(url))
    variants = [(e, v) for e in engines for v in ("ms", "k0")]
    for r in range(rounds):
        order = variants[r % 4 :] + variants[: r % 4]
        for task in TASKS:
            for engine, variant in order:
                url, served = engines[engine]
                flush_cache(url)
                hints = MS if variant == "ms" else K0
                with ThreadPoolExecutor(BATCH) as pool:
                    done = list(pool.map(lambda p, u=url, s=served, h=hints: complete(u, s, p, 32, h), prompts[task]))
                tpot = statistics.mean(c.tpot_s for c in done) * 1e3
                rows.append(dict(round=r, task=task, engine=engine, variant=variant, tpot_ms=tpot))
                print(rows[-1], flush=True)
summary = {}
for task in TASKS:
    cell = {}
    for engine in engines:

        def tpot(v, r, key=(task, engine)):
            return next(
                x["tpot_ms"] for x in rows if (x["task"], x["engine"], x["variant"], x["round"]) == (*key, v, r)
            )

        ratios = [tpot("ms", r) / tpot("k0", r) for r in range(rounds)]
        cell[f"{engine}_ms_over_k0_rounds"] = ratios
        cell[f"{engine}_ms_over_k0_median"] = statistics.median(ratios)
    summary[task] = cell
print(json.dumps(summary, indent=1))
(here / f"ab-{drafter}.json").write_text(
    json.dumps(dict(drafter=drafter, batch=BATCH, rounds=rounds, summary=summary, rows=rows), indent=1)
)
