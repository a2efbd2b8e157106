"""AMX tile forms past 16 rows (sixty-second session): one product of all m rows (the kernel runs them in pieces of 16
under each weight block) against the forms stream_moe used for bfloat16 experts before, on moe-fine x48's expert
shapes, weights cold (24 experts in turn, each read once a pass), 1 thread, the best of 3 interleaved passes:
  whole   stream_linear(x, w, AMX form) over all m rows
  pieces  stream_linear per 16 rows (the weight read once a piece: the path of 17-32 rows before)
  linear  F.linear on a float32 copy of the weight (the path past 32 rows before)
`PYTHONPATH=. .venv/bin/python bench/results/amx-rows-s62/amx_rows.py` on a CPU with AMX."""

import json
import sys
import time

import torch

from service.kernels import stream_gemm

EXPERTS, PASSES = 24, 3


def main() -> None:
    torch.set_num_threads(1)
    assert stream_gemm.load() and stream_gemm.amx_ready(), "needs the library and AMX tiles"
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, shape in (("w13", (9216, 256)), ("w2", (256, 4608))):
        weights = [torch.randn(*shape, generator=g).to(torch.bfloat16) for _ in range(EXPERTS)]
        for m in (16, 17, 24, 32, 48, 64, 128, 256):
            x = torch.randn(m, shape[1], generator=g)
            forms = {
                "whole": lambda w, x=x: stream_gemm.stream_linear(x, w, None, stream_gemm.AMX_KIND),
                "pieces": lambda w, x=x: [
                    stream_gemm.stream_linear(x[c : c + 16], w, None, stream_gemm.AMX_KIND)
                    for c in range(0, x.shape[0], 16)
                ],
                "linear": lambda w, x=x: torch.nn.functional.linear(x, w.to(torch.float32)),
            }
            best = {}
            for _ in range(PASSES):
                for form, fn in forms.items():
                    start = time.perf_counter()
                    for w in weights:
                        fn(w)
                    ms = (time.perf_counter() - start) / EXPERTS * 1e3
                    best[form] = min(best.get(form, ms), ms)
            row = {"weight": name, "rows": m, **{f"{k}_ms": round(v, 3) for k, v in best.items()}}
            row["whole_over_best_other"] = round(best["whole"] / min(best["pieces"], best["linear"]), 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"threads": 1, "experts": EXPERTS, "passes": PASSES, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
