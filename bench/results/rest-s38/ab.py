"""Scratch A/B (38th session): moe-serve's resting (Decision.rest_until) on and off, two speculative engines of one
drafter up together on moe-fine x48 (PYTHONPATH per engine: OLD = the code before it, NEW = with it), batch 1,
3 held-out prompts per task x 32 tokens, request by request in rotated order: each engine under moe-serve and at
the K = 0 hint (the floor moe-serve's plain steps can reach). Per engine, moe-serve / K = 0 cancels the engine
instance's own speed. usage: python ab.py DRAFTER ROUNDS OLD_PATH NEW_PATH [TASKS] -> ab-DRAFTER[-TASKS].json"""

import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache  # noqa: E402
from bench._heldout import prompt_sets  # noqa: E402
from bench._load import complete, served_model  # noqa: E402
from bench._models import bench_engine, deciding_setup, timed_model  # noqa: E402
from bench.policies import K0, as_token_ids, speculation  # noqa: E402
from moe_sglang.server import running_engine  # noqa: E402
from moe_sglang.settings import EngineSettings  # noqa: E402

drafter, rounds, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
TASKS = tuple(sys.argv[5].split(",")) if len(sys.argv) > 5 else ("math", "code")
setup = deciding_setup()
model = timed_model(setup)
texts = prompt_sets(3, 600)
prompts = as_token_ids({t: texts[t] for t in TASKS}, model, 128)
MS = {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}}
here = Path(__file__).parent

rows = []
with contextlib.ExitStack() as stack:
    engines = {}
    for name, path in (("old", old), ("new", new)):
        os.environ["PYTHONPATH"] = path
        cfg = bench_engine(model, speculation(drafter, setup), 1, EngineSettings())
        url = stack.enter_context(running_engine(cfg, log_path=f"/tmp/rest-{drafter}-{name}.log"))
        engines[name] = (url, served_model(url))
    variants = [(e, v) for e in engines for v in ("ms", "k0")]
    for r in range(rounds):
        order = variants[r % 4 :] + variants[: r % 4]
        for task in TASKS:
            for p_i, prompt in enumerate(prompts[task]):
                for engine, variant in order:
                    url, served = engines[engine]
                    flush_cache(url)
                    c = complete(url, served, prompt, 32, MS if variant == "ms" else K0)
                    rows.append(
                        dict(
                            round=r,
                            task=task,
                            prompt=p_i,
                            engine=engine,
                            variant=variant,
                            tpot_ms=c.tpot_s * 1e3,
                            itl_ms=c.itl_s * 1e3,
                        )
                    )
                    print(rows[-1], flush=True)
summary = {}
for task in TASKS:
    cell = {}
    for engine in engines:
        ratios = []
        for r in range(rounds):

            def tpot(v, key=(task, engine), r=r):
                return statistics.mean(
                    x["tpot_ms"] for x in rows if (x["task"], x["engine"], x["variant"], x["round"]) == (*key, v, r)
                )

            ratios.append(tpot("ms") / tpot("k0"))
        ratios.sort()
        cell[f"{engine}_ms_over_k0"] = dict(median=statistics.median(ratios), min=ratios[0], max=ratios[-1])
        for v in ("ms", "k0"):
            cell[f"{engine}_{v}_tpot_ms"] = statistics.median(
                x["tpot_ms"] for x in rows if (x["task"], x["engine"], x["variant"]) == (task, engine, v)
            )
    summary[task] = cell
print(json.dumps(summary, indent=1))
(here / f"ab-{drafter}{'' if TASKS == ('math', 'code') else '-' + '-'.join(TASKS)}.json").write_text(
    json.dumps(dict(drafter=drafter, rounds=rounds, summary=summary, rows=rows), indent=1)
)
