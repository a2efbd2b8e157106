"""Scratch probe (fortieth session): per-stream timing of waves of BATCH requests (32 tokens; math prompts; at the
K = 0 hint on the NGRAM engine) on three engines up together, fresh: plain (overlap scheduler), plain-sync (overlap
off), MOE_SERVE_NGRAM; engines rotated per round. Per completion: TTFT, last text chunk, end of stream, chunks,
median and max gap between chunks: where TPOT (e2e - TTFT over tokens - 1) and ITL (median chunk gap) part.
usage: python bench/results/streams-s40/streams.py [BATCH] [ROUNDS] -> streams.json"""

import contextlib
import itertools
import json
import os
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import K0, as_token_ids, speculation
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

BATCH = int(sys.argv[1]) if len(sys.argv) > 1 else 8
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
setup = deciding_setup()
model = timed_model(setup)
prompts = as_token_ids(prompt_sets(BATCH, 600), model, 128)["math"]
engines = {
    "plain": (bench_engine(model, SpeculationConfig("none"), BATCH), None),
    "plain-sync": (bench_engine(model, SpeculationConfig("none"), BATCH, extra=("--disable-overlap-schedule",)), None),
    "ngram-k0": (bench_engine(model, speculation("ngram", setup), BATCH), K0),
}
out = []
with contextlib.ExitStack() as st:
    urls = {n: st.enter_context(running_engine(c, log_path=f"/tmp/streams-{n}.log")) for n, (c, _) in engines.items()}
    served = {n: served_model(u) for n, u in urls.items()}
    for r in range(ROUNDS):
        names = list(engines)[r % 3 :] + list(engines)[: r % 3]
        for n in names:
            flush_cache(urls[n])
            h = engines[n][1]
            with ThreadPoolExecutor(BATCH) as pool:
                done = list(pool.map(lambda p, u=urls[n], s=served[n], h=h: complete(u, s, p, 32, h), prompts))
            for c in done:
                gaps = [b - a for a, b in itertools.pairwise(c.chunk_s)]
                row = dict(
                    round=r,
                    engine=n,
                    ttft=c.ttft_s * 1e3,
                    last_chunk=c.chunk_s[-1] * 1e3,
                    e2e=c.e2e_s * 1e3,
                    tail=(c.e2e_s - c.chunk_s[-1]) * 1e3,
                    chunks=len(c.chunk_s),
                    tpot=c.tpot_s * 1e3,
                    tpot_last=(c.chunk_s[-1] - c.ttft_s) / (c.output_tokens - 1) * 1e3,
                    gap_med=statistics.median(gaps) * 1e3,
                    gap_max=max(gaps) * 1e3,
                    tokens=c.output_tokens,
                )
                out.append(row)
            rs = [x for x in out if x["round"] == r and x["engine"] == n]
            print(
                n,
                r,
                {
                    k: round(statistics.mean(x[k] for x in rs), 1)
                    for k in ("ttft", "tpot", "tpot_last", "tail", "gap_med", "gap_max", "chunks")
                },
                flush=True,
            )
with open("bench/results/streams-s40/streams.json", "w") as f:
    json.dump(out, f, indent=1)
for n in engines:
    rs = [x for x in out if x["engine"] == n]
    print(
        "ALL",
        n,
        {
            k: round(statistics.mean(x[k] for x in rs), 1)
            for k in ("ttft", "tpot", "tpot_last", "tail", "gap_med", "gap_max", "chunks")
        },
    )
