"""Scratch microbenchmark of the forty-fourth session: an expert hit of m > 16 rows with bfloat16 weights, the plan's
walks over pieces of 16 rows against F.linear on a float32 copy (output: chunks.txt). Run from the repository root."""

import time

import torch

from service.kernels import stream_gemm

torch.set_num_threads(1)
assert stream_gemm.load()
E = 8
w13 = (torch.randn(E, 9216, 256) / 16).to(torch.bfloat16)
w2 = (torch.randn(E, 256, 4608) / 64).to(torch.bfloat16)
walks13, walks2, lin = [3] * 16, [2] * 16, [-1] * 16
for m in (17, 24, 32, 48, 64, 96):
    x, w = torch.randn(m, 256), torch.ones(m, 1)
    res = {}
    for name, k13, k2 in (("chunked", walks13, walks2), ("linear-copy", lin, lin)):
        best = 9.0
        for _ in range(3):
            s = time.perf_counter()
            for e in range(E):
                stream_gemm.stream_moe(x, w13, w2, torch.full((m, 1), e, dtype=torch.int64), w, k13, k2)
            best = min(best, (time.perf_counter() - s) / E)
        res[name] = best * 1e3
    print(m, {k: round(v, 2) for k, v in res.items()}, "chunked/linear", round(res["chunked"] / res["linear-copy"], 2))
