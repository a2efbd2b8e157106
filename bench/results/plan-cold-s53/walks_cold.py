"""Scratch check of the fifty-third session (README, issue 15): the stream walks over moe-fine x48's expert shapes as
bfloat16, weights from memory (64 distinct matrices in turn: 302 / 151 MB, beyond the L3), 1 thread, the walks
taking turns matrix set by matrix set for ROUNDS rounds; GB/s median [min, max] per walk and row count (walks_cold.txt:
9 rounds). Run from the repository root: .venv/bin/python bench/results/plan-cold-s53/walks_cold.py [ROUNDS]"""

import statistics
import sys
import time

import torch

torch.set_num_threads(1)
from service.kernels import small_gemm, stream_gemm  # noqa: E402

assert stream_gemm.load()
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
torch.manual_seed(0)
WALKS = ("stream_l2", "stream_l2_near", "stream_seq", "stream_seq_hw")
for out, inn in ((9216, 256), (256, 4608)):
    stack = torch.randn(64, out, inn).to(torch.bfloat16)
    gb = 64 * out * inn * 2 / 1e9
    for m in (1, 2, 3):
        x = torch.randn(m, inn)
        rates = {f: [] for f in WALKS}
        for r in range(rounds):
            for form in WALKS[r % len(WALKS) :] + WALKS[: r % len(WALKS)]:  # rotating order
                fn = small_gemm._FORM_FN[form]
                start = time.perf_counter()
                for w in stack:
                    fn(x, w)
                rates[form].append(gb / (time.perf_counter() - start))
        cells = (f"{f[7:]}={statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]" for f, v in rates.items())
        print(f"{out}x{inn} m={m}: " + "  ".join(cells), flush=True)
