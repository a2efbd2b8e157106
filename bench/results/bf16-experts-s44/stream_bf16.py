"""Scratch microbenchmark of the forty-fourth session (README, issue 15): the stream kernel's walks over moe-fine x48's
expert shapes with float32 and bfloat16 weights, 64 random experts in turn (weights from memory), 1 thread, best of 3
passes; GB/s of weight bytes per walk (f32K / bf16K: KINDS[K]). Also checks every walk's bfloat16 product against
F.linear on the widened weight first. Run from the repository root: .venv/bin/python
bench/results/bf16-experts-s44/stream_bf16.py speed"""

import sys
import time

import torch

torch.set_num_threads(1)
from service.kernels import stream_gemm  # noqa: E402

assert stream_gemm.load()
torch.manual_seed(0)
for out, inn in ((9216, 256), (256, 4608)):
    w = torch.randn(out, inn).to(torch.bfloat16)
    for m in (1, 2, 3, 5, 8, 16):
        x = torch.randn(m, inn)
        ref = torch.nn.functional.linear(x, w.float())
        for isa in stream_gemm.supported_isas():
            for kind in range(5):
                err = (stream_gemm.stream_linear(x, w, isa, kind) - ref).abs().max().item()
                assert err < 1e-3 * ref.abs().max().item(), (out, inn, m, isa, kind, err)
print("correct")
if len(sys.argv) > 1:
    for out, inn in ((9216, 256), (256, 4608)):
        ws32 = [torch.randn(out, inn) for _ in range(64)]
        ws16 = [w.to(torch.bfloat16) for w in ws32]
        for m in (1, 2, 4, 8):
            x = torch.randn(m, inn)
            res = {}
            for name, ws in (("f32", ws32), ("bf16", ws16)):
                for kind in range(5):
                    best = 9.0
                    for _ in range(3):
                        s = time.perf_counter()
                        for w in ws:
                            stream_gemm.stream_linear(x, w, None, kind)
                        best = min(best, time.perf_counter() - s)
                    res[(name, kind)] = sum(w.numel() * w.element_size() for w in ws) / best / 1e9
            print(out, inn, "m", m, " ".join(f"{n}{k}:{v:.1f}" for (n, k), v in res.items()))
