"""Scratch (70th session): how far one and two threads read memory on this host, against how fast a batch-1 decode
step's expert products run at each, outside the engine.

Per round, one and two threads alternating (which first alternates too):
- `sum`: torch.sum over 512 MB of float32 (a read of every byte, little arithmetic);
- `copy`: Tensor.copy_ of the same (GB/s of bytes read; as many are written);
- `decode_moe`: four MoE sublayers of moe-fine x48's shapes (32 experts of 3 x 256 x 4608 in bfloat16, top-4, one
  token) through torch.ops.moe_serve.decode_moe with every product in the `split4` walk (the form this host's GEMM
  plans chose at one row), the median of 30 steps; GB/s of the 16 experts' weights a step reads.
usage: PYTHONPATH=. python bench/results/avx2-threads-s70/threads.py OUT.json [rounds] [LIBRARY.so]
LIBRARY.so: a build of the op library to load instead of the checkout's (an A/B of two builds of the kernel)."""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from service.kernels import stream_gemm

LAYERS, EXPERTS, HIDDEN, INTER, TOP_K = 4, 32, 256, 4608, 4
STEP_BYTES = LAYERS * TOP_K * 3 * HIDDEN * INTER * 2


def read_rates(big: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    best = {}
    for name, op in (("sum", big.sum), ("copy", lambda: out.copy_(big))):
        op()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            op()
            times.append(time.perf_counter() - start)
        best[name] = big.numel() * big.element_size() / min(times) / 1e9
    return best["sum"], best["copy"]


def moe_step_ms(layers: list, isa: str, kinds: list[int], tokens: int = 1) -> float:
    times = []
    for _ in range(30):
        h = torch.randn(tokens, HIDDEN)
        start = time.perf_counter()
        for w13, w2, router, norm in layers:
            h = torch.ops.moe_serve.decode_moe(
                h, norm, 1e-5, router, TOP_K, True, 0.0, w13, w2, isa, kinds, kinds, kinds
            )[0]
            h = h / h.norm(dim=1, keepdim=True)  # keeps the next layer's routing input at unit scale
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def load_library(path: str | None) -> None:
    """The op library: the build at `path` (an A/B of two builds), else the checkout's."""
    if path:
        torch.ops.load_library(path)
        stream_gemm._STATE["loaded"] = True
    else:
        assert stream_gemm.load(), stream_gemm.error()


def expert_layers() -> list[tuple]:
    """LAYERS MoE layers of random weights: w13, w2 (bfloat16), router, norm."""
    return [
        (
            torch.randn(EXPERTS, 2 * INTER, HIDDEN).to(torch.bfloat16),
            torch.randn(EXPERTS, HIDDEN, INTER).to(torch.bfloat16),
            torch.randn(EXPERTS, HIDDEN),
            torch.ones(HIDDEN),
        )
        for _ in range(LAYERS)
    ]


def main() -> None:
    load_library(sys.argv[3] if len(sys.argv) > 3 else None)
    isa = stream_gemm.best_isa()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    big = torch.ones(128 << 20)
    out = torch.empty_like(big)
    layers = expert_layers()
    kinds = [stream_gemm.KINDS.index("split4")] * stream_gemm.MAX_ROWS
    rows = []
    for rnd in range(rounds):
        for threads in (1, 2) if rnd % 2 == 0 else (2, 1):
            torch.set_num_threads(threads)
            assert stream_gemm.threads() == threads
            read, copy = read_rates(big, out)
            step = moe_step_ms(layers, isa, kinds)
            step8 = moe_step_ms(layers, isa, kinds, 8)
            rows.append(
                {
                    "round": rnd,
                    "threads": threads,
                    "sum_gb_s": read,
                    "copy_read_gb_s": copy,
                    "moe_step_ms": step,
                    "moe_step_b8_ms": step8,
                    "moe_gb_s": STEP_BYTES / step / 1e6,
                }
            )
            print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    summary = {}
    for threads in (1, 2):
        mine = [r for r in rows if r["threads"] == threads]
        summary[threads] = {
            k: [min(r[k] for r in mine), statistics.median(r[k] for r in mine), max(r[k] for r in mine)]
            for k in ("sum_gb_s", "copy_read_gb_s", "moe_step_ms", "moe_gb_s", "moe_step_b8_ms")
        }
    ratios = [
        a["moe_step_ms"] / b["moe_step_ms"]
        for a, b in zip([r for r in rows if r["threads"] == 1], [r for r in rows if r["threads"] == 2], strict=True)
    ]
    for threads, s in summary.items():
        print(f"{threads} thread(s), min / median / max:", {k: [round(v, 2) for v in vs] for k, vs in s.items()})
    print("decode_moe one thread / two threads per round:", [round(x, 2) for x in ratios])
    Path(sys.argv[1]).write_text(
        json.dumps(
            {
                "isa": isa,
                "cpu": Path("/proc/cpuinfo").read_text().count("processor"),
                "rows": rows,
                "summary": summary,
                "one_over_two": ratios,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
