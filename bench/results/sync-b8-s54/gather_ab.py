"""Scratch A/B (54th session): the arrival gather counting a burst until the engine's first step that is not a prefill
(`new`, this tree) or until the first receive after the first prefill (`old`, a worktree at 052f8b0 in /tmp/old); two
plain synchronous engines on moe-fine x48 up together; per round and engine, as in bench.policies: three lone math
requests, then two waves of 8; prefill sizes from the engine logs. Usage: gather_ab.py ROUNDS OUT.json"""

import concurrent.futures
import contextlib
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import PROMPT_TOKENS, as_token_ids
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings


def main() -> None:
    rounds, out = int(sys.argv[1]), sys.argv[2]
    paths = {"old": "/tmp/old", "new": os.getcwd()}
    os.environ["MOE_SERVE_EXTENSIONS_DIR"] = os.path.join(os.getcwd(), "build", "extensions")  # same C++ source
    model = timed_model(deciding_setup())
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["math"][:8]
    rows = []
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, path in paths.items():
            os.environ["PYTHONPATH"] = path
            cfg = bench_engine(model, SpeculationConfig(), 1, EngineSettings(), ("--disable-overlap-schedule",))
            urls[name] = stack.enter_context(running_engine(cfg, log_path=Path(f"{out}.{name}.log")))
        served = {n: served_model(u) for n, u in urls.items()}
        for r in range(rounds):
            for name in list(paths) if r % 2 == 0 else list(paths)[::-1]:
                url = urls[name]
                flush_cache(url)
                for p in prompts[:3]:
                    complete(url, served[name], p, 32)
                for w in range(2):
                    with concurrent.futures.ThreadPoolExecutor(8) as pool:
                        done = list(pool.map(complete, [url] * 8, [served[name]] * 8, prompts, [32] * 8))
                    tpot = sum(c.tpot_s for c in done) / 8 * 1e3
                    ttft = sum(c.ttft_s for c in done) / 8 * 1e3
                    rows.append(dict(round=r, engine=name, wave=w, tpot_ms=tpot, ttft_ms=ttft))
                    print(rows[-1], flush=True)
    sizes = {}
    for n in paths:
        sizes[n] = [int(x) for x in re.findall(r"#new-seq: (\d+)", Path(f"{out}.{n}.log").read_text())]
    print(sizes)
    Path(out).write_text(json.dumps(dict(rows=rows, prefill_sizes=sizes), indent=1))


main()
