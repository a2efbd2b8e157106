"""Scratch (70th session): plain-decode TPOT of two builds of the op library in the engine (moe-fine x48, bench
engine, 2 threads), engines one at a time, variants alternating and which first alternating by round: batch 1 (one
request) and batch 8 (eight at once), each TPOT from two output lengths (40 and 200 tokens, the best of two of
each). A variant is a source of csrc/stream_gemm.cpp and a build folder (MOE_SERVE_EXTENSIONS_DIR) holding its
build: the file is put in place before its engine starts, and the checkout's own is put back at the end.
usage: PYTHONPATH=. python ab_engine.py OUT.json ROUNDS NAME=SOURCE.cpp:BUILD_DIR NAME=SOURCE.cpp:BUILD_DIR"""

import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests as http

from bench._models import bench_engine, deciding_setup, timed_model
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

SOURCE = Path("service/kernels/csrc/stream_gemm.cpp")
PROMPTS = [
    "Once upon a time, in a small village by the sea, there lived",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "The train leaves at 3 pm and travels 120 km at 80 km per hour, so",
    "The history of the printing press begins in",
    "import numpy as np\n\ndef normalise(rows):\n",
    "A farmer has 17 sheep and buys 5 more each week. After",
    "She opened the old letter and read the first line:",
    "class Stack:\n    def __init__(self):\n",
]


def generate(url: str, prompt: str, n: int) -> float:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    start = time.perf_counter()
    http.post(f"{url}/generate", json=body, timeout=600).raise_for_status()
    return time.perf_counter() - start


def batch_time(url: str, batch: int, n: int) -> float:
    with ThreadPoolExecutor(batch) as pool:
        start = time.perf_counter()
        list(pool.map(lambda p: generate(url, p, n), PROMPTS[:batch]))
        return time.perf_counter() - start


def tpot_ms(url: str, batch: int) -> float:
    short = min(batch_time(url, batch, 40) for _ in range(2))
    long = min(batch_time(url, batch, 200) for _ in range(2))
    return (long - short) / 160 * 1e3


def main() -> None:
    out, rounds = Path(sys.argv[1]), int(sys.argv[2])
    variants = {}
    for spec in sys.argv[3:]:
        name, rest = spec.split("=", 1)
        source, folder = rest.split(":", 1)
        variants[name] = (Path(source).read_bytes(), folder)
    own = SOURCE.read_bytes()
    model = timed_model(deciding_setup())
    rows = []
    try:
        for rnd in range(rounds):
            names = list(variants) if rnd % 2 == 0 else list(reversed(variants))
            for name in names:
                source, folder = variants[name]
                SOURCE.write_bytes(source)
                os.environ["MOE_SERVE_EXTENSIONS_DIR"] = folder
                config = bench_engine(model, SpeculationConfig(), 2)
                with running_engine(config, log_path=out.with_name(f"engine-{name}.log")) as url:
                    batch_time(url, 8, 16)  # warm
                    row = {"round": rnd, "variant": name, "b1_ms": tpot_ms(url, 1), "b8_ms": tpot_ms(url, 8)}
                rows.append(row)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    finally:
        SOURCE.write_bytes(own)
    summary = {}
    for name in variants:
        mine = [r for r in rows if r["variant"] == name]
        summary[name] = {
            b: [min(r[b] for r in mine), statistics.median(r[b] for r in mine), max(r[b] for r in mine)]
            for b in ("b1_ms", "b8_ms")
        }
        print(name, "min / median / max", {b: [round(v, 2) for v in vs] for b, vs in summary[name].items()})
    first, second = list(variants)
    ratios = {
        b: [
            s[b] / f[b]
            for f, s in zip(
                [r for r in rows if r["variant"] == first], [r for r in rows if r["variant"] == second], strict=True
            )
        ]
        for b in ("b1_ms", "b8_ms")
    }
    print(f"{second} / {first} per round:", {b: [round(x, 3) for x in v] for b, v in ratios.items()})
    out.write_text(json.dumps({"rows": rows, "summary": summary, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
