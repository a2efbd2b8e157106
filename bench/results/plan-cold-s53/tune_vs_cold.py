"""Scratch check of the fifty-third session (README, issue 15), the fifty-second's tune_vs_cold.py with the plan's
timer as it is now: does GemmPlan's timing (small_gemm.time_forms: small_gemm.timed_matrices of one layer's matrices
in turn, enough for twice the last-level cache, best of small_gemm.timing_passes(5, n) passes) pick the stream walk
that is fastest when the weights come from memory, as in a decode step? moe-fine x48's expert shapes as bfloat16, 1
thread. Per shape and row count: the plan timer's GB/s per form (3 independent calls) and the same forms over 64
distinct matrices in turn (weights from DRAM: 302 / 151 MB, beyond any L3 of these hosts), best of 3 passes. Run from
the repository root: .venv/bin/python bench/results/plan-cold-s53/tune_vs_cold.py"""

import time

import torch

torch.set_num_threads(1)
from service.kernels import small_gemm, stream_gemm  # noqa: E402

assert stream_gemm.load()
torch.manual_seed(0)
WALKS = tuple(f for f in small_gemm.STREAM_FORMS if f not in small_gemm.AMX_FORMS)
for out, inn in ((9216, 256), (256, 4608)):
    stack = torch.randn(64, out, inn).to(torch.bfloat16)
    gb = out * inn * 2 / 1e9
    for m in (1, 2, 4, 8):
        line = [f"{out}x{inn} m={m}"]
        for call in range(3):
            times = small_gemm.time_forms(stack[:32], m, 5, WALKS, torch.float32)
            timed = small_gemm.timed_matrices(stack[:32])
            line.append(
                f"plan{call} ({timed} matrices): "
                + " ".join(f"{f[7:] or 'lock'}={timed * gb / t:.1f}" for f, t in times.items())
            )
        x = torch.randn(m, inn)
        cold = {}
        for form in WALKS:
            best = 9.0
            for _ in range(3):
                start = time.perf_counter()
                for w in stack:
                    small_gemm._FORM_FN[form](x, w)
                best = min(best, time.perf_counter() - start)
            cold[form] = 64 * gb / best
        line.append("cold: " + " ".join(f"{f[7:] or 'lock'}={v:.1f}" for f, v in cold.items()))
        print("\n  ".join(line), flush=True)
