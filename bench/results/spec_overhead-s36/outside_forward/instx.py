"""scratch: K=0 load at batch 1 and 8 on one engine; the engine log's INSTX lines (last per batch size)."""

import os
import sys
from pathlib import Path

from bench._heldout import prompt_sets
from bench._models import DENSE_DRAFTS, resolve_model
from bench.policies import as_token_ids
from bench.spec_overhead import K0, engine, speculation, timed_run
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

variant, log = sys.argv[1], Path(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
model = resolve_model(os.environ.get("MODEL"))
prompts = as_token_ids(prompt_sets(16, 400), model, 96)["mixed"]
if variant == "plain-sync":
    cfg, extra = engine(model, SpeculationConfig("none"), "ragged", 1, ("--disable-overlap-schedule",)), None
elif variant == "plain":
    cfg, extra = engine(model, SpeculationConfig("none"), "ragged", 1), None
else:
    cfg, extra = (
        engine(model, speculation(variant, DENSE_DRAFTS.get(model.name) or DENSE_DRAFTS.get("moe-fine")), "ragged", 1),
        K0,
    )
with running_engine(cfg, log_path=log) as url:
    for batch in [int(b) for b in os.environ.get("BATCHES", "1,8").split(",")]:
        for _ in range(reps):
            r = timed_run(url, prompts, 64, batch, extra)
last = {}
for line in log.read_text().splitlines():
    if "INSTX" in line:
        last[line.split("bs=")[1].split()[0]] = line.split("INSTX ")[1]
for _bs, line in sorted(last.items()):
    print(variant, line, flush=True)
