"""Scratch (64th session): one row's forms timed as GemmPlan.tune times them (small_gemm.time_forms, the engine's
repeats), 8 times in a row, on layer 0's w13 of moe-fine x48 in bfloat16, in a process doing nothing else, 1 thread;
GB/s per form per timing. One JSON object on stdout.

    PYTHONPATH=. python bench/results/split-walks-s64/alone.py DIR_FOR_THE_X48_COPY > alone.json"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

torch.set_num_threads(1)
from bench._models import FINE_MODEL, inflated  # noqa: E402
from service.kernels import small_gemm, stream_gemm  # noqa: E402

assert stream_gemm.load()
copy = inflated(FINE_MODEL, Path(sys.argv[1]), 48)
state = {}
for part in sorted(copy.glob("*.safetensors")):
    state.update(load_file(part))
prefix = "model.layers.0.block_sparse_moe.experts"
experts = sum(1 for key in state if key.startswith(prefix) and key.endswith(".w1.weight"))
w13 = torch.stack(
    [torch.cat([state[f"{prefix}.{e}.w1.weight"], state[f"{prefix}.{e}.w3.weight"]]) for e in range(experts)]
).to(torch.bfloat16)
gigabytes = small_gemm.timed_matrices(w13) * w13[0].numel() * 2 / 1e9
timings = []
for _ in range(8):
    seconds = small_gemm.time_forms(w13, 1, 5, small_gemm.FORMS, torch.float32)
    timings.append({form: round(gigabytes / s, 2) for form, s in sorted(seconds.items(), key=lambda kv: kv[1])})
print(json.dumps({"w13": list(w13.shape), "gb_s": timings}, indent=1))
