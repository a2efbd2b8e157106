"""Scratch (70th session): threads.py's four MoE sublayers of moe-fine x48's shapes at two threads in every stream
walk (all products of a step in the one walk), batch 1 and 8, median ms of 30 steps per walk per round. Run once
per build of the library (before / after 5356254: products split across the threads / whole experts per thread),
processes alternating. usage: PYTHONPATH=. python walks_across.py OUT.json ROUNDS LIBRARY.so"""

import json
import sys
from pathlib import Path

import torch
from threads import expert_layers, load_library, moe_step_ms  # noqa: I001 - this folder's script

from service.kernels import stream_gemm


def main() -> None:
    load_library(sys.argv[3])
    isa = stream_gemm.best_isa()
    torch.set_num_threads(2)
    layers = expert_layers()
    rows = []
    for rnd in range(int(sys.argv[2])):
        for kind, walk in enumerate(stream_gemm.KINDS):
            kinds = [kind] * stream_gemm.MAX_ROWS
            rows.append(
                {
                    "round": rnd,
                    "walk": walk,
                    "b1_ms": moe_step_ms(layers, isa, kinds),
                    "b8_ms": moe_step_ms(layers, isa, kinds, 8),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    Path(sys.argv[1]).write_text(json.dumps({"library": sys.argv[3], "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
