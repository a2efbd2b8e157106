"""Scratch (61st session): plain CPU engines on moe-fine x48 (1 torch thread each, all up together), the patch's
`forward_thread` off or on at a GIL switch interval (forward_thread.patch applied; its scratch variable
MOE_SERVE_SWITCH_S), rounds rotated; TPOT at batch 1 (4 requests one after another) and 8 (one wave), 64 tokens.

    PYTHONPATH=. .venv/bin/python bench/results/forward-thread-s61/switch_ab.py off,on:0.0005,on:0.0001 ROUNDS
"""

import dataclasses
import os
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

import transformers

from bench._heldout import heldout_documents
from bench._load import run_batch, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

variants, rounds = sys.argv[1].split(","), int(sys.argv[2])  # off | on:SWITCH_S
model = Path("build/bench-models/moe-fine-x48")
tok = transformers.AutoTokenizer.from_pretrained(model)
docs = heldout_documents("prose", 4) + heldout_documents("python", 4)
prompts = [tok.decode(tok(d)["input_ids"][:96]) for d in docs[:8]]
res = {v: {1: [], 8: []} for v in variants}
with ExitStack() as stack:
    urls = {}
    for v in variants:
        setting, _, switch = v.partition(":")
        if switch:
            os.environ["MOE_SERVE_SWITCH_S"] = switch
        settings = dataclasses.replace(EngineSettings(), forward_thread=setting)
        config = bench_engine(model, SpeculationConfig(), 1, settings=settings)
        urls[v] = stack.enter_context(running_engine(config, log_path=Path(f"/tmp/ab2-{v}.log")))
    name = served_model(next(iter(urls.values())))
    for url in urls.values():  # warm-up
        run_batch(url, name, prompts[:2], 16, 2)
    for r in range(rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            for b in (1, 8):
                res[v][b].append(run_batch(urls[v], name, prompts[:4] if b == 1 else prompts, 64, b)["tpot_ms"])
        print(r, {v: {b: round(x[b][-1], 2) for b in (1, 8)} for v, x in res.items()}, flush=True)
for v in variants:
    print(v, {b: tuple(round(f(res[v][b]), 2) for f in (statistics.median, min, max)) for b in (1, 8)})
