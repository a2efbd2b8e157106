"""Scratch A/B (37th session): the engine's expert forward over moe-fine-x48's four MoE layers, its weights on 2 MiB
transparent huge pages (MADV_COLLAPSE) or on the allocator's 4 KiB pages, two copies in one process, rounds
interleaved. Ran at 1a89068, whose service/kernels/hugepages.py was reverted after this run (README beside it).

    PYTHONPATH=. .venv/bin/python bench/results/hugepages-s37/expert_forward_ab.py
"""

import re
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from service.kernels.hugepages import advise  # at 1a89068
from service.kernels.small_gemm import GemmPlan, moe_experts

torch.set_num_threads(1)
FOLDER = Path("build/bench-models/moe-fine-x48")
LAYERS, TOP_K, ROUNDS = 4, 4, 40

weights = {}
for f in sorted(FOLDER.glob("*.safetensors")):
    weights.update(load_file(f))
experts = 1 + max(int(m.group(1)) for k in weights if (m := re.search(r"experts\.(\d+)\.", k)))


def stacked(layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    name = f"model.layers.{layer}.block_sparse_moe.experts"
    w13 = torch.stack(
        [torch.cat([weights[f"{name}.{e}.w1.weight"], weights[f"{name}.{e}.w3.weight"]]) for e in range(experts)]
    )
    w2 = torch.stack([weights[f"{name}.{e}.w2.weight"] for e in range(experts)])
    return w13.float().contiguous(), w2.float().contiguous()


huge = [stacked(layer) for layer in range(LAYERS)]
weights.clear()
copies = {"default": [(a.clone(), b.clone()) for a, b in huge], "huge": huge}
print(advise([t for pair in huge for t in pair]).describe())
plan = GemmPlan()
plan.tune(list(huge[0]))
hidden = huge[0][0].shape[2]
gen = torch.Generator().manual_seed(0)


def run(layers, rows: int) -> float:
    x = torch.randn(rows, hidden)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:TOP_K] for _ in range(rows)]).to(torch.int32)
    topk_weights = torch.full((rows, TOP_K), 1.0 / TOP_K)
    t0 = time.perf_counter()
    for w13, w2 in layers:
        moe_experts(plan, x, w13, w2, ids, topk_weights)
    return time.perf_counter() - t0


times = {name: {1: [], 8: []} for name in copies}
for r in range(ROUNDS):
    for name in ("default", "huge") if r % 2 else ("huge", "default"):
        for rows in (1, 8):
            times[name][rows].append(run(copies[name], rows))
for name, by_rows in times.items():
    print(name, {rows: round(statistics.median(v) * 1e3, 2) for rows, v in by_rows.items()}, "ms median")
for rows in (1, 8):
    ratio = np.array(times["huge"][rows]) / np.array(times["default"][rows])
    print(rows, "huge/default per round", round(float(np.median(ratio)), 3), ratio.min().round(3), ratio.max().round(3))
