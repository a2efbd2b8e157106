"""Scratch (72nd session): does a batch-8 wave's first decode steps' fall (runs 5 and 8: ~21 ms falling to ~14.5 by
the sixth step) happen on the plain engine too (no speculative algorithm, SGLang's overlap loop)? A bench engine on
the deciding model at 1 thread; waves of eight prose prompts (bench.policies' prompt sets) decoding 32 tokens
greedily, streamed; per output position, the median over a wave's requests of the gap between consecutive streamed
chunks (one token each on this engine), then the median over waves.
usage: PYTHONPATH=. python bench/results/zen5-b8-s72/plain_positions.py OUT.json [waves]"""

import concurrent.futures
import itertools
import json
import statistics
import sys
from pathlib import Path

from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

waves = int(sys.argv[2]) if len(sys.argv) > 2 else 6
prompts = prompt_sets(8 * waves, 400)["prose"]
config = bench_engine(timed_model(deciding_setup()), SpeculationConfig(), 1)
rows = []
with running_engine(config, log_path=Path("/tmp/plain-positions-engine.log")) as url:
    model = served_model(url)
    complete(url, model, prompts[0], 8)  # warm
    for w in range(waves):
        batch = prompts[8 * w : 8 * w + 8]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            done = list(pool.map(lambda p: complete(url, model, p, 32), batch))
        gaps = [[(b - a) * 1e3 for a, b in itertools.pairwise(c.chunk_s)] for c in done]
        by_position = [statistics.median(g[i] for g in gaps if len(g) > i) for i in range(min(map(len, gaps)))]
        rows.append(by_position)
        print(" ".join(f"{x:.1f}" for x in by_position[:12]), flush=True)
medians = [statistics.median(col) for col in zip(*rows, strict=False)]
print("median over waves:", " ".join(f"{x:.1f}" for x in medians))
Path(sys.argv[1]).write_text(json.dumps({"waves": rows, "median_by_position": medians}, indent=1))
