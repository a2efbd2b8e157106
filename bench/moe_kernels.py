"""Time the MoE kernels: torch reference vs Triton (and SGLang's own fused MoE when importable), with and without the
MoE-Spec budget mask, plus the INT4 dequant-GEMM vs its reference and the dense matmul (issue 10 part 4).

    python -m bench.moe_kernels                    # CPU: the reference only; Triton timings need a GPU
    python -m bench.moe_kernels --shapes olmoe,mixtral --tokens 1,8,64 --dtype bf16 --json out.json   # on a GPU

Prints a table and (with --json) writes every row. `max_err` is the largest |output - reference| for the same inputs; on
the `dense` rows it is the INT4 quantization error (reference = INT4, dense = the unquantized weight).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable

import torch

from service.kernels import int4, moe_ref

# name -> (hidden, intermediate, experts, top-k); "tiny" is the bundled model's layer (notes/tiny-model.md)
SHAPES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (256, 512, 8, 2),
    "olmoe": (2048, 1024, 64, 8),
    "mixtral": (4096, 14336, 8, 2),
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def time_ms(fn: Callable[[], torch.Tensor], device: torch.device, repeats: int) -> float:
    """Mean wall time of `fn` in milliseconds after one warm-up call (which also compiles Triton kernels)."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def sglang_fused_experts() -> Callable | None:
    """SGLang 0.5.23's Triton fused MoE (gate-then-up w13 like ours), or None where it cannot be imported."""
    try:
        from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import outplace_fused_experts
    except Exception:
        return None
    return outplace_fused_experts


def moe_rows(shape: str, tokens: int, budget: int, dtype, device, repeats: int) -> list[dict]:
    hidden, inter, experts, k = SHAPES[shape]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=gen).to(device, dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(device, dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(device, dtype)
    logits = torch.randn(tokens, experts, generator=gen).to(device)
    ids, weights = moe_ref.route_topk(logits, k)
    mask = moe_ref.select_budget_experts(torch.softmax(logits, -1), budget)
    sub_ids, sub_weights = moe_ref.apply_budget_substitution(logits, mask, k)
    want = moe_ref.moe_forward(x, w13, w2, ids, weights)
    want_budget = moe_ref.moe_forward(x, w13, w2, sub_ids, sub_weights, mask)

    runs: dict[str, tuple[Callable[[], torch.Tensor], torch.Tensor]] = {
        "torch-ref": (lambda: moe_ref.moe_forward(x, w13, w2, ids, weights), want),
        "torch-ref+budget": (lambda: moe_ref.moe_forward(x, w13, w2, sub_ids, sub_weights, mask), want_budget),
    }
    if device.type == "cuda":
        from service.kernels.triton.fused_moe_masked import fused_moe_masked

        runs["triton"] = (lambda: fused_moe_masked(x, w13, w2, ids, weights), want)
        runs["triton+budget"] = (lambda: fused_moe_masked(x, w13, w2, sub_ids, sub_weights, mask), want_budget)
        sglang = sglang_fused_experts()
        if sglang is not None:
            runs["sglang-fused"] = (lambda: sglang(x, w13, w2, weights, ids.to(torch.int32)), want)
    rows = []
    for backend, (fn, reference) in runs.items():
        budgeted = backend.endswith("+budget")
        rows.append(
            {
                "op": "moe",
                "shape": shape,
                "tokens": tokens,
                "backend": backend,
                "experts_active": int(torch.unique(sub_ids if budgeted else ids).numel()),
                "ms": time_ms(fn, device, repeats),
                "max_err": float((fn().float() - reference.float()).abs().max()),
            }
        )
    return rows


def int4_rows(shape: str, tokens: int, dtype, device, repeats: int) -> list[dict]:
    """One expert's gate-up projection [2I, H] as the INT4 draft would run it."""
    hidden, inter, _, _ = SHAPES[shape]
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(2 * inter, hidden, generator=gen)
    packed, scales = (t.to(device) for t in int4.quantize_int4(w))
    x = torch.randn(tokens, hidden, generator=gen).to(device, dtype)
    dense = w.to(device, dtype)
    want = int4.int4_matmul_ref(x, packed, scales)
    runs = {"dense": lambda: x @ dense.T, "int4-ref": lambda: int4.int4_matmul_ref(x, packed, scales)}
    if device.type == "cuda":
        from service.kernels.triton.int4_gemm import int4_gemm

        runs["int4-triton"] = lambda: int4_gemm(x, packed, scales)
    return [
        {
            "op": "int4_gemm",
            "shape": shape,
            "tokens": tokens,
            "backend": name,
            "experts_active": 1,
            "ms": time_ms(fn, device, repeats),
            "max_err": float((fn().float() - want.float()).abs().max()),
        }
        for name, fn in runs.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="tiny", help=f"comma-separated, from {sorted(SHAPES)}")
    parser.add_argument("--tokens", default="1,4,16", help="comma-separated token counts (verify batch sizes)")
    parser.add_argument("--budget-frac", type=float, default=0.5, help="budget B as a fraction of the layer's experts")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args(argv)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = DTYPES[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; choose from {sorted(SHAPES)}")
    if not 0 < args.budget_frac <= 1:
        parser.error("--budget-frac must be in (0, 1]")
    if device.type == "cpu":
        print("no CUDA device: timing the torch reference only; Triton timings need a GPU")

    rows = []
    for shape in shapes:
        experts, k = SHAPES[shape][2:]
        budget = max(k, round(args.budget_frac * experts))
        for tokens in (int(t) for t in args.tokens.split(",")):
            rows += moe_rows(shape, tokens, budget, dtype, device, args.repeats)
            rows += int4_rows(shape, tokens, dtype, device, args.repeats)

    header = f"{'op':<10}{'shape':<9}{'T':>5}  {'backend':<18}{'experts':>8}{'ms':>10}{'max_err':>11}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['op']:<10}{r['shape']:<9}{r['tokens']:>5}  {r['backend']:<18}{r['experts_active']:>8}"
            f"{r['ms']:>10.3f}{r['max_err']:>11.2e}"
        )
    if args.json:
        device_name = torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu"
        report = {
            "device": device_name,
            "dtype": str(dtype),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "budget_frac": args.budget_frac,
            "rows": rows,
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
