"""Scratch A/B of the forty-fourth session: prefill time (a 1-token completion of the same prompt, so its time is the
prefill plus one step and the HTTP round trip) on x48 with bfloat16 experts (the default) and with float32 experts,
two engines up together, 1 thread each, rounds alternating. Run from the repository root:
.venv/bin/python bench/results/bf16-experts-s44/prefill_ab.py [ROUNDS] > bench/results/bf16-experts-s44/prefill_ab.json"""

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

MODEL = Path("build/bench-models/moe-fine-x48")
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
LENGTHS = (64, 240)  # prompt tokens (the model's context is 256)


def prefill_s(url: str, tokens: int, seed: int) -> float:
    ids = [(7 * i + 13 * seed) % 8000 + 100 for i in range(tokens)]  # a new prompt each time: no prefix cache hit
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}}
    t0 = time.perf_counter()
    httpx.post(f"{url}/generate", json=body, timeout=300).raise_for_status()
    return time.perf_counter() - t0


engines = {"bf16-exact": EngineSettings(), "float32": EngineSettings(expert_weights="float32")}
rows = []
with contextlib.ExitStack() as stack:
    urls = {
        name: stack.enter_context(
            running_engine(bench_engine(MODEL, SpeculationConfig(), 1, s), Path(f"/tmp/pf-{name}.log"))
        )
        for name, s in engines.items()
    }
    for url in urls.values():
        prefill_s(url, 32, 999)  # warm-up
    for r in range(ROUNDS):
        order = list(urls) if r % 2 == 0 else list(urls)[::-1]
        for tokens in LENGTHS:
            row = {"round": r, "tokens": tokens}
            for name in order:
                row[name] = prefill_s(urls[name], tokens, seed=r * 10 + tokens)
            rows.append(row)
summary = {
    tokens: {
        "bf16_ms": statistics.median(x["bf16-exact"] for x in rows if x["tokens"] == tokens) * 1e3,
        "float32_ms": statistics.median(x["float32"] for x in rows if x["tokens"] == tokens) * 1e3,
        "ratio_bf16_over_float32": [round(x["bf16-exact"] / x["float32"], 3) for x in rows if x["tokens"] == tokens],
    }
    for tokens in LENGTHS
}
print(json.dumps({"model": str(MODEL), "summary": summary, "rows": rows}, indent=1))
