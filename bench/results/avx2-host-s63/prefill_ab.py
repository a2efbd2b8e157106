"""Scratch (63rd session, AVX2-only EPYC): one x48 expert's products (w13 [9216, 256], w2 [256, 4608], bfloat16) at m
rows, 1 thread, best of 2 passes over 24 experts, per expert: F.linear on a float32 copy made per call (the engine's
path past 32 rows on a CPU without AMX), F.linear on copies made beforehand, the copies alone. Output: prefill_ab.txt.
Usage: .venv/bin/python bench/results/avx2-host-s63/prefill_ab.py"""

import time

import torch

torch.set_num_threads(1)
E = 24
w13 = [torch.randn(9216, 256).to(torch.bfloat16) for _ in range(E)]
w2 = [torch.randn(256, 4608).to(torch.bfloat16) for _ in range(E)]
w13f = [w.float() for w in w13]
w2f = [w.float() for w in w2]


def t(fn, reps=2):
    best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / E * 1e3


for m in (17, 33, 64, 128, 256):
    x = torch.randn(m, 256)
    a = torch.randn(m, 4608)
    conv = t(
        lambda x=x, a=a: (
            [torch.nn.functional.linear(x, w.float()) for w in w13]
            + [torch.nn.functional.linear(a, w.float()) for w in w2]
        )
    )
    pre = t(
        lambda x=x, a=a: (
            [torch.nn.functional.linear(x, w) for w in w13f] + [torch.nn.functional.linear(a, w) for w in w2f]
        )
    )
    onlyconv = t(lambda: [w.float() for w in w13] + [w.float() for w in w2])
    flops = 2 * m * (9216 * 256 + 256 * 4608) / 1e9
    print(
        f"m={m:4d} convert+linear {conv:6.2f} ms  prewidened {pre:6.2f} ms  convert only {onlyconv:5.2f}  GFLOP/s pre {flops / pre * 1e3:5.1f} conv {flops / conv * 1e3:5.1f}"
    )
