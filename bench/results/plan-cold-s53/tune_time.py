"""Scratch check of the fifty-third session (README, issue 15): what timing the plan from memory costs at an engine's
first start on a machine (the plan is cached per machine afterwards, plan_cache.py): GemmPlan.tune over moe-fine x48's
two expert shapes (32 bfloat16 experts each, float32 rows, the stream forms, 16 row counts, repeats 5), timing 5
passes of 8 matrices (before), 5 passes of small_gemm.timed_matrices, and those in small_gemm.timing_passes passes
(now), twice each, alternating; prints the seconds and the forms chosen at 1-4 rows. Run from the repository root: .venv/bin/python bench/results/plan-cold-s53/tune_time.py"""

import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(1)
from service.kernels import small_gemm  # noqa: E402
from service.kernels.plan_cache import PlanCache  # noqa: E402

torch.manual_seed(0)
stacks = [torch.randn(32, 9216, 256).to(torch.bfloat16), torch.randn(32, 256, 4608).to(torch.bfloat16)]
matrices, passes = small_gemm.timed_matrices, small_gemm.timing_passes
variants = {
    "5 passes of 8 matrices": (lambda stack: min(stack.shape[0], 8), passes),
    "5 passes of timed_matrices": (matrices, lambda repeats, n: repeats),
    "timing_passes of timed_matrices": (matrices, passes),
}
for run in range(2):
    for name, (counter, passer) in variants.items():
        small_gemm.timed_matrices, small_gemm.timing_passes = counter, passer
        plan = small_gemm.GemmPlan(candidates=small_gemm.STREAM_FORMS, cache=PlanCache(Path(tempfile.mkdtemp())))
        start = time.perf_counter()
        plan.tune(stacks, inputs=torch.float32)
        seconds = time.perf_counter() - start
        forms = {
            f"{o}x{i}": [plan.form(o, i, m)[7:] or "lock" for m in (1, 2, 3, 4)] for o, i in ((9216, 256), (256, 4608))
        }
        print(f"run {run} {name}: {seconds:.1f} s, forms at 1-4 rows {forms}", flush=True)
