"""A/B of the stream kernels' library built with and without OpenMP, on the engine as a user starts it on this
machine (threads inherited: torch's default, every core), moe-fine x48, greedy. Two engines up together, one per
build (the no-OpenMP one loads a library built from the same sources with CFLAGS ("-O3",) from NOOMP_DIR: build it
by running the kernel tests with those flags and MOE_SERVE_EXTENSIONS_DIR=NOOMP_DIR, then write the current build
stamp into NOOMP_DIR/moe_serve_stream_gemm/stamp so the loader takes it); rounds interleaved in rotated order, batch 1
(4 requests one after another) and batch 8 (one wave), 64 tokens each; TPOT from the client's stream.

    PYTHONPATH=. .venv/bin/python bench/results/openmp-s60/threads_ab.py NOOMP_DIR ROUNDS OUT.json [THREADS]

threads_ab.json beside it: `/tmp/ext-noomp 6 threads_ab.json` (threads inherited), run by this script's first form,
which measured the same and differed only in layout (2026-12-05, ended 22:05 UTC).
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path

import transformers

from bench._heldout import heldout_documents
from bench._load import run_batch, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

noomp, rounds, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
threads = int(sys.argv[4]) if len(sys.argv) > 4 else None
model = Path("build/bench-models/moe-fine-x48")
tok = transformers.AutoTokenizer.from_pretrained(model)
docs = heldout_documents("prose", 4) + heldout_documents("python", 4)
prompts = [tok.decode(tok(d)["input_ids"][:96]) for d in docs[:8]]


def engine(env_dir):
    if env_dir is None:
        os.environ.pop("MOE_SERVE_EXTENSIONS_DIR", None)
    else:
        os.environ["MOE_SERVE_EXTENSIONS_DIR"] = str(env_dir)
    log = Path(f"/tmp/ab-{'openmp' if env_dir is None else 'no-openmp'}.log")
    return running_engine(bench_engine(model, SpeculationConfig(), threads), log_path=log)


rows = []
with engine(noomp) as url_a, engine(None) as url_b:
    urls = {"no-openmp": url_a, "openmp": url_b}
    name = served_model(url_a)
    for url in urls.values():  # warm-up
        run_batch(url, name, prompts[:2], 16, 2)
    for r in range(rounds):
        order = list(urls) if r % 2 == 0 else list(urls)[::-1]
        for variant in order:
            for batch in (1, 8):
                got = run_batch(urls[variant], name, prompts[:4] if batch == 1 else prompts, 64, batch)
                keep = {
                    "tpot_ms": got["tpot_ms"],
                    "e2e_per_token_ms": got["e2e_per_token_ms"],
                    "steal": got["steal_share"],
                }
                rows.append({"round": r, "variant": variant, "batch": batch, **keep})
                print(rows[-1], flush=True)
summary = {}
for batch in (1, 8):
    for variant in ("no-openmp", "openmp"):
        v = [x["tpot_ms"] for x in rows if x["batch"] == batch and x["variant"] == variant]
        summary[f"{variant} b{batch}"] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
    ratios = []
    for r in range(rounds):
        pair = {x["variant"]: x["tpot_ms"] for x in rows if x["batch"] == batch and x["round"] == r}
        ratios.append(pair["openmp"] / pair["no-openmp"])
    summary[f"openmp / no-openmp b{batch}"] = {
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }
print(json.dumps(summary, indent=1))
out.write_text(
    json.dumps(
        {
            "at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "threads": threads,
            "cpus": os.cpu_count(),
            "summary": summary,
            "rows": rows,
        },
        indent=1,
    )
)
