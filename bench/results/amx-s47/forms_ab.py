"""Weight GB/s per form of small_gemm (the stream walks and the AMX forms) for moe-fine x48's expert shapes kept as
bfloat16, 1 thread, 1-16 rows: time_forms over 8 experts in turn (weights from memory), best of 7 interleaved
passes, 3 repetitions. Prints a table and writes forms_ab.json beside this file.

    .venv/bin/python bench/results/amx-s47/forms_ab.py
"""

import json
import platform
import sys
from pathlib import Path

import torch

from service.kernels import small_gemm, stream_gemm

torch.set_num_threads(1)
assert stream_gemm.load(), stream_gemm.error()
print("amx ready:", stream_gemm.amx_ready(), "isa:", stream_gemm.best_isa())
rows_list = [int(r) for r in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 2, 4, 8, 12, 16]
shapes = {"w13": (9216, 256), "w2": (256, 4608)}
out = {"machine": platform.processor() or platform.machine(), "amx_ready": stream_gemm.amx_ready(), "runs": []}
for rep in range(3):
    for name, (o, i) in shapes.items():
        stack = (torch.randn(48, o, i) * 0.05).to(torch.bfloat16)
        for m in rows_list:
            times = small_gemm.time_forms(stack, m, repeats=7, inputs=torch.float32)
            gbs = {f: round(8 * o * i * 2 / t / 1e9, 2) for f, t in times.items()}
            out["runs"].append({"rep": rep, "weight": name, "rows": m, "gb_per_s": gbs})
            print(rep, name, m, " ".join(f"{f}:{v}" for f, v in gbs.items()), flush=True)
Path(__file__).with_name("forms_ab.json").write_text(json.dumps(out, indent=1))
