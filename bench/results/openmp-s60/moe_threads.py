"""stream_moe alone at 1 and 2 torch threads: 8 layers of 32 bfloat16 experts shaped like moe-fine x48's (w13 [9216,
256], w2 [256, 4608]), 4 hit by one token per layer, walk 0, median of 30 passes.

    PYTHONPATH=. .venv/bin/python bench/results/openmp-s60/moe_threads.py
"""

import statistics
import time

import torch

from service.kernels import stream_gemm

assert stream_gemm.load(), stream_gemm.error()
EXPERTS, HIDDEN, INTER, TOP_K, LAYERS = 32, 256, 4608, 4, 8
torch.manual_seed(0)
layers = [
    (torch.randn(EXPERTS, 2 * INTER, HIDDEN).to(torch.bfloat16), torch.randn(EXPERTS, HIDDEN, INTER).to(torch.bfloat16))
    for _ in range(LAYERS)
]
x = torch.randn(1, HIDDEN)
walks = [0] * stream_gemm.MAX_ROWS


def step() -> None:
    for w13, w2 in layers:
        ids = torch.randperm(EXPERTS)[:TOP_K].view(1, TOP_K)
        stream_gemm.stream_moe(x, w13, w2, ids, torch.full((1, TOP_K), 1 / TOP_K), walks, walks)


for threads in (1, 2, 1, 2, 1, 2):
    torch.set_num_threads(threads)
    step()
    times = []
    for _ in range(30):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    ms = statistics.median(times) * 1e3
    gb_per_s = LAYERS * TOP_K * 3 * INTER * HIDDEN * 2 / (ms / 1e3) / 1e9
    print(f"threads {threads}: {LAYERS} layers x {TOP_K} experts, {ms:.2f} ms, {gb_per_s:.1f} GB/s")
