"""Scratch (63rd session, AVX2-only EPYC): GB/s of three stream walks over 48 bfloat16 weights of x48's expert shapes
(weights from memory), 1 thread, at 1-8 rows, best of 3 passes; one JSON line of results. Run in turn on the code
as it is (old-*.json, a worktree with its own MOE_SERVE_EXTENSIONS_DIR) and with chains.patch applied
(chains-*.json), three times each, alternating; summary.txt: medians, min-max, chains / old."""

import json
import time

import torch

torch.set_num_threads(1)
from service.kernels import small_gemm, stream_gemm  # noqa: E402

assert stream_gemm.load()
torch.manual_seed(0)
FORMS = ("stream_seq", "stream_seq_hw", "stream_l2_near")
out_rows = {}
for out, inn in ((9216, 256), (256, 4608)):
    stack = torch.randn(48, out, inn).to(torch.bfloat16)
    gb = out * inn * 2 / 1e9
    for m in (1, 2, 3, 4, 5, 6, 8):
        x = torch.randn(m, inn)
        for form in FORMS:
            b = 9.0
            for _ in range(3):
                s = time.perf_counter()
                for w in stack:
                    small_gemm._FORM_FN[form](x, w)
                b = min(b, time.perf_counter() - s)
            out_rows[f"{out}x{inn} m={m} {form}"] = len(stack) * gb / b
print(json.dumps(out_rows))
