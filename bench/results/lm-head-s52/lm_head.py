"""Scratch timing of the fifty-second session (README, issue 15): moe-fine's LM head product ([8192, 256], a bfloat16
checkpoint's values) at 1 and 8 rows, as the target's direct forward multiplies it before (float32 weight, the dense
plan's form) and after (the bfloat16 copy, its own plan's form), 1 thread. Each product follows a 64 MB sweep that
evicts the caches, as a decode step's other weights do on x48 (cold), or follows the previous product (warm, where
the whole model sits in a large L3). Median of 200 products each, forms alternating. Run from the repository root:
.venv/bin/python bench/results/lm-head-s52/lm_head.py"""

import statistics
import time

import torch

torch.set_num_threads(1)
from moe_sglang.cpu_moe import exact_bf16  # noqa: E402
from service.kernels import stream_gemm  # noqa: E402
from service.kernels.small_gemm import GemmPlan  # noqa: E402

assert stream_gemm.load()
torch.manual_seed(0)
w32 = torch.randn(8192, 256).to(torch.bfloat16).float()
w16 = exact_bf16(w32)
f32, b16 = GemmPlan().tune([w32]), GemmPlan().tune([w16], inputs=torch.float32)
sweep = torch.empty(16 * 2**20)
for rows in (1, 8):
    x = torch.randn(rows, 256)
    assert torch.allclose(f32.mm(x, w32), b16.mm(x, w16), atol=1e-4, rtol=1e-4)
    for cold in (True, False):
        times = {"float32": [], "bfloat16": []}
        for _ in range(200):
            for name, plan, w in (("float32", f32, w32), ("bfloat16", b16, w16)):
                if cold:
                    sweep.add_(1.0)
                start = time.perf_counter()
                plan.mm(x, w)
                times[name].append(time.perf_counter() - start)
        a, b = (statistics.median(times[n]) * 1e3 for n in ("float32", "bfloat16"))
        print(
            f"rows {rows} {'cold' if cold else 'warm'}: float32 {a:.3f} ms ({f32.form(8192, 256, rows)}), "
            f"bfloat16 {b:.3f} ms ({b16.form(8192, 256, rows)}), ratio {b / a:.2f}",
            flush=True,
        )
