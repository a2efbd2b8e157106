"""A/B of a plain CPU engine's decode forwards on a thread of their own (`forward_thread=on`) against the scheduler's
thread (`off`, as SGLang runs them): moe-fine x48 greedy, two plain engines up together at THREADS torch threads
each, rounds interleaved in rotated order, batch 1 (4 requests one after another) and batch 8 (one wave), 64 tokens
each; TPOT from the client's stream. First the two engines' greedy completions of the 8 prompts are compared (the
texts must be equal).

    PYTHONPATH=. .venv/bin/python bench/results/forward-thread-s61/ab.py ROUNDS THREADS OUT.json
"""

import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import requests
import transformers

from bench._heldout import heldout_documents
from bench._load import run_batch, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

rounds, threads, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
model = Path("build/bench-models/moe-fine-x48")
tok = transformers.AutoTokenizer.from_pretrained(model)
docs = heldout_documents("prose", 4) + heldout_documents("python", 4)
prompts = [tok.decode(tok(d)["input_ids"][:96]) for d in docs[:8]]
VARIANTS = ("off", "on")


def engine(setting):
    settings = dataclasses.replace(EngineSettings(), forward_thread=setting)
    config = bench_engine(model, SpeculationConfig(), threads, settings=settings)
    return running_engine(config, log_path=Path(f"/tmp/ab-forward-{setting}.log"))


def greedy(url, name):
    texts = []
    for p in prompts:
        body = {"model": name, "prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
        texts.append(requests.post(f"{url}/v1/completions", json=body, timeout=600).json()["choices"][0]["text"])
    return texts


rows = []
with engine("off") as url_off, engine("on") as url_on:
    urls = {"off": url_off, "on": url_on}
    name = served_model(url_off)
    texts = {v: greedy(u, name) for v, u in urls.items()}
    equal = texts["off"] == texts["on"]
    print("greedy texts equal:", equal, flush=True)
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
        for variant in order:
            for batch in (1, 8):
                got = run_batch(urls[variant], name, prompts[:4] if batch == 1 else prompts, 64, batch)
                keep = {k: got[k] for k in ("tpot_ms", "e2e_per_token_ms", "steal_share")}
                rows.append({"round": r, "variant": variant, "batch": batch, **keep})
                print(rows[-1], flush=True)
summary = {}
for batch in (1, 8):
    for variant in VARIANTS:
        v = [x["tpot_ms"] for x in rows if x["batch"] == batch and x["variant"] == variant]
        summary[f"{variant} b{batch}"] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
    ratios = []
    for r in range(rounds):
        pair = {x["variant"]: x["tpot_ms"] for x in rows if x["batch"] == batch and x["round"] == r}
        ratios.append(pair["on"] / pair["off"])
    summary[f"on / off b{batch}"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
print(json.dumps(summary, indent=1))
out.write_text(
    json.dumps(
        {
            "at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "threads": threads,
            "cpus": os.cpu_count(),
            "greedy_equal": equal,
            "summary": summary,
            "rows": rows,
        },
        indent=1,
    )
)
