"""Scratch A/B of the fifty-second session (README, issue 15): plain-decode TPOT of three engines up together, 1
thread each, rounds rotating their order: `before` = the code at caf82e9 (a git worktree, PYTHONPATH per engine,
build/ linked into it), `after` = this checkout (the target's LM head read as bfloat16 for <= 16 rows, and SGLang's
eager runner without its input copy), `after-copy` = this checkout with SGLANG_EAGER_INPUT_NO_COPY=0 (the LM head
alone). TPOT as bench.decode_peer measures it (two output lengths, 8 and 168 tokens), batch 1 and 8, moe-fine and
x48. Run from the repository root: PYTHONPATH=. .venv/bin/python bench/results/lm-head-s52/ab_decode.py WORKTREE OUT"""

import contextlib
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

worktree, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
here = str(Path.cwd())
ENGINES = {
    "before": (str(worktree), {}),
    "after": (here, {}),
    "after-copy": (here, {"SGLANG_EAGER_INPUT_NO_COPY": "0"}),
}
ROUNDS = 6
rows = []
for model in (Path("service/models/assets/moe-fine"), Path("build/bench-models/moe-fine-x48")):
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["mixed"]
    with contextlib.ExitStack() as stack:
        urls = {}
        saved = dict(os.environ)
        for name, (path, env) in ENGINES.items():
            os.environ.update({"PYTHONPATH": path, **env})
            config = EngineConfig(model_path=str(model), port=0, threads=1, max_running_requests=16)
            urls[name] = stack.enter_context(running_engine(config, out / f"engine-{model.name}-{name}.log"))
            os.environ.clear()
            os.environ.update(saved)
        names = list(ENGINES)
        for batch in (1, 8):
            for r in range(ROUNDS):
                order = names[r % len(names) :] + names[: r % len(names)]
                got = {n: decode_tpot_ms(urls[n], model.name, prompts[:batch], 8, 168) for n in order}
                rows.append({"model": model.name, "batch": batch, "round": r, **got})
                print(rows[-1], flush=True)
summary = []
for model in dict.fromkeys(r["model"] for r in rows):
    for batch in (1, 8):
        mine = [r for r in rows if r["model"] == model and r["batch"] == batch]
        row = {"model": model, "batch": batch, **{f"{n}_ms": statistics.median(r[n] for r in mine) for n in ENGINES}}
        for n in ("after", "after-copy"):
            ratios = sorted(r[n] / r["before"] for r in mine)
            row[f"{n}/before"] = f"{statistics.median(ratios):.3f} [{ratios[0]:.3f}, {ratios[-1]:.3f}]"
        summary.append(row)
        print(row, flush=True)
(out / "ab_decode.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
