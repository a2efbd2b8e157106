"""Scratch (63rd session): a target verify of chains by the C++ chain op (new) against the torch ops (old, a
worktree of the commit before) on STANDALONE engines side by side (moe-fine x48, 2 threads each), prose prompts of
128 tokens, 32 output tokens, at static K = 4, moe-serve and K = 0, alternating wave by wave in a rotated order; per
round each variant's mean TPOT over 6 waves of BATCH requests (env BATCH, default 1). NEW_FIRST=1 starts the new
engine first (the engine started second read 2-5 % faster at K = 0 in both runs). Usage:
[BATCH=8] [NEW_FIRST=1] PYTHONPATH=. python ab_chain.py OLD_TREE OLD_EXT_DIR OUT [rounds]"""

import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

import transformers

from bench._heldout import heldout_documents
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import drafter_settings, speculation
from moe_sglang.server import running_engine

old_tree, old_ext, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
out.mkdir(parents=True, exist_ok=True)
setup = deciding_setup()
cfg = bench_engine(timed_model(setup), speculation("standalone", setup), 2, drafter_settings())
tok = transformers.AutoTokenizer.from_pretrained(setup.model)
BATCH = int(os.environ.get("BATCH", "1"))
prompts = [tok(d)["input_ids"][:128] for d in heldout_documents("prose", 6 * BATCH)]
waves = [prompts[i : i + BATCH] for i in range(0, len(prompts), BATCH)]
HINTS = {
    "static-4": {"policy": "static", "max_k": 4},
    "moe-serve": {"policy": "moe-serve"},
    "k0": {"policy": "static", "max_k": 0},
}
with contextlib.ExitStack() as stack:
    saved = dict(os.environ)
    urls = {}

    def start(name):
        if name == "old":
            os.environ["PYTHONPATH"] = old_tree
            os.environ["MOE_SERVE_EXTENSIONS_DIR"] = old_ext
        urls[name] = stack.enter_context(running_engine(cfg, out / f"engine-{name}.log"))
        os.environ.clear()
        os.environ.update(saved)

    for name in ("new", "old") if os.environ.get("NEW_FIRST") else ("old", "new"):
        start(name)
    urls = {k: urls[k] for k in ("old", "new")}
    models = {k: served_model(u) for k, u in urls.items()}
    rows = {f"{v}/{h}": [] for v in urls for h in HINTS}
    for r in range(rounds):
        acc = {k: [] for k in rows}
        for i, p in enumerate(waves):
            order = [(v, h) for h in HINTS for v in urls]
            order = order[(r + i) % len(order) :] + order[: (r + i) % len(order)]
            for v, h in order:
                res = run_batch(
                    urls[v], models[v], p, 32, BATCH, {"custom_params": {"moe_serve": {"tenant": "bench", **HINTS[h]}}}
                )
                acc[f"{v}/{h}"].append(res["tpot_ms"])
        for k, vals in acc.items():
            rows[k].append(statistics.mean(vals))
        print(r, {k: round(v[-1], 2) for k, v in rows.items()}, flush=True)
(out / "ab.json").write_text(json.dumps(rows, indent=1))
for h in HINTS:
    ratios = [n / o for n, o in zip(rows[f"new/{h}"], rows[f"old/{h}"], strict=True)]
    print(
        h,
        "old",
        [round(x, 2) for x in rows[f"old/{h}"]],
        "new",
        [round(x, 2) for x in rows[f"new/{h}"]],
        "new/old",
        [round(x, 3) for x in ratios],
    )
