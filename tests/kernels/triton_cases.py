"""Triton-vs-reference comparison cases, run by test_triton_kernels.py.

On CPU they run in a child process (`python -m tests.kernels.triton_cases`) with TRITON_INTERPRET=1: triton.jit reads that
variable when a kernel is decorated and when it runs, so it must be set before anything in the process imports triton —
something an in-process test cannot promise once other test packages (SGLang) have imported it. On CUDA they run in-process.
Shapes are small on purpose: the interpreter executes every program instance in Python.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch

from service.kernels import int4, moe_ref

Pair = tuple[torch.Tensor, torch.Tensor]  # (Triton result, reference result)


@dataclass(frozen=True)
class Case:
    name: str  # test id
    run: Callable[[torch.device], Pair]  # builds inputs on the device, returns (got, want)
    atol: float  # absolute tolerance under the interpreter (exact fp32 numpy matmuls)


def _moe_inputs(device, tokens, hidden, inter, experts, k, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    ids, weights = moe_ref.route_topk(torch.randn(tokens, experts, generator=gen), k)
    return x.to(device, dtype), w13.to(device, dtype), w2.to(device, dtype), ids.to(device), weights.to(device)


def _fused(*args, **kwargs):
    from service.kernels.triton.fused_moe_masked import fused_moe_masked

    return fused_moe_masked(*args, **kwargs)


def _int4_gemm(*args, **kwargs):
    from service.kernels.triton.int4_gemm import int4_gemm

    return int4_gemm(*args, **kwargs)


def moe_case(tokens, hidden, inter, experts, k, mask_bits=None, dtype=torch.float32, nan_masked=False):
    def run(device):
        x, w13, w2, ids, weights = _moe_inputs(device, tokens, hidden, inter, experts, k, dtype)
        mask = None if mask_bits is None else torch.tensor(mask_bits, dtype=torch.bool, device=device)
        if nan_masked:
            # Masked experts must never be read: NaN there would poison any output that touched them.
            w13[~mask] = float("nan")
            w2[~mask] = float("nan")
        return _fused(x, w13, w2, ids, weights, mask), moe_ref.moe_forward(x, w13, w2, ids, weights, mask)

    return run


def align_blocks_case(tokens, k, experts, block_m, masked=False):
    """The one-program layout (align_blocks.py) equals the torch layout it replaces, cell for cell."""

    def run(device):
        from service.kernels.triton.align_blocks import align_blocks
        from service.kernels.triton.expert_blocks import sort_slots_by_expert

        gen = torch.Generator().manual_seed(tokens * 131 + experts)
        ids = torch.randint(0, experts, (tokens, k), generator=gen).to(device)
        mask = (torch.rand(experts, generator=gen) < 0.5).to(device) if masked else None
        got, want = align_blocks(ids, experts, block_m, mask), sort_slots_by_expert(ids, experts, block_m, mask)
        return torch.cat((got.slot_ids, got.block_expert)), torch.cat((want.slot_ids, want.block_expert))

    return run


def mask_all_equals_none(device):
    x, w13, w2, ids, weights = _moe_inputs(device, 9, 32, 48, 4, 2)
    everything = torch.ones(4, dtype=torch.bool, device=device)
    return _fused(x, w13, w2, ids, weights, everything), _fused(x, w13, w2, ids, weights, None)


def budget_pipeline(device):
    """select_budget_experts → substitution routing → masked forward, as the verify step would run it."""
    gen = torch.Generator().manual_seed(3)
    x, w13, w2, _, _ = _moe_inputs(device, 12, 32, 32, 8, 2)
    logits = torch.randn(12, 8, generator=gen).to(device)
    mask = moe_ref.select_budget_experts(torch.softmax(logits, -1), budget=3)
    ids, weights = moe_ref.apply_budget_substitution(logits, mask, 2)
    return _fused(x, w13, w2, ids, weights, mask), moe_ref.moe_forward(x, w13, w2, ids, weights, mask)


def int4_case(rows, cols, in_features, group_size):
    def run(device):
        gen = torch.Generator().manual_seed(1)
        packed, scales = int4.quantize_int4(torch.randn(cols, in_features, generator=gen), group_size)
        x = torch.randn(rows, in_features, generator=gen)
        packed, scales, x = packed.to(device), scales.to(device), x.to(device)
        return _int4_gemm(x, packed, scales, group_size), int4.int4_matmul_ref(x, packed, scales, group_size)

    return run


def dispatch_forced_triton(device):
    from service.kernels import dispatch

    x, w13, w2, ids, weights = _moe_inputs(device, 6, 32, 32, 4, 2)
    mask = torch.tensor([True, True, False, True], device=device)
    got = dispatch.moe_forward(x, w13, w2, ids, weights, mask, backend="triton")
    return got, moe_ref.moe_forward(x, w13, w2, ids, weights, mask)


def dispatch_forced_triton_int4(device):
    from service.kernels import dispatch

    packed, scales = int4.quantize_int4(torch.randn(16, 128, generator=torch.Generator().manual_seed(2)))
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(4))
    packed, scales, x = packed.to(device), scales.to(device), x.to(device)
    return dispatch.int4_matmul(x, packed, scales, backend="triton"), int4.int4_matmul_ref(x, packed, scales)


def rejects_mixed_dtypes(device):
    x, w13, w2, ids, weights = _moe_inputs(device, 3, 32, 32, 4, 2)
    try:
        _fused(x.half(), w13, w2, ids, weights)
    except ValueError:
        return torch.zeros(1), torch.zeros(1)
    return torch.ones(1), torch.zeros(1)


CASES = [
    Case("align_blocks_one_chunk", align_blocks_case(5, 2, 6, 4), 0.0),
    Case("align_blocks_many_chunks_masked", align_blocks_case(40, 8, 64, 16, masked=True), 0.0),
    Case("align_blocks_block_of_one", align_blocks_case(9, 3, 5, 1, masked=True), 0.0),
    Case("align_blocks_no_slots", align_blocks_case(0, 2, 4, 16), 0.0),
    Case("moe_small_unaligned", moe_case(5, 48, 40, 4, 2), 1e-5),
    Case("moe_multi_block_per_expert", moe_case(40, 64, 32, 4, 2), 1e-5),
    Case("moe_top1", moe_case(7, 32, 32, 6, 1), 1e-5),
    Case("moe_mask_nan_experts", moe_case(10, 32, 48, 6, 2, [1, 0, 1, 0, 1, 1], nan_masked=True), 1e-5),
    Case("moe_mask_none_selected", moe_case(4, 32, 32, 4, 2, [0, 0, 0, 0]), 0.0),
    Case("moe_mask_all_equals_none", mask_all_equals_none, 0.0),
    Case("moe_fp16", moe_case(6, 32, 32, 4, 2, [1, 1, 0, 1], dtype=torch.float16), 1e-2),
    Case("moe_budget_pipeline", budget_pipeline, 1e-5),
    Case("int4_group128", int4_case(5, 40, 256, 128), 1e-4),
    Case("int4_group32_rows_over_block", int4_case(17, 24, 96, 32), 1e-4),
    Case("dispatch_forced_triton", dispatch_forced_triton, 1e-5),
    Case("dispatch_forced_triton_int4", dispatch_forced_triton_int4, 1e-4),
    Case("rejects_mixed_dtypes", rejects_mixed_dtypes, 0.0),
]


def check(case: Case, device: torch.device) -> str | None:
    """None when the case passes, else a message saying why (exceptions included)."""
    try:
        got, want = case.run(device)
        # fp32 tl.dot is TF32 on CUDA: tolerance widens there; the interpreter multiplies in exact fp32.
        atol = case.atol if device.type == "cpu" else max(case.atol, 3e-2)
        torch.testing.assert_close(got.float().cpu(), want.float().cpu(), atol=atol, rtol=atol)
    except Exception:
        return traceback.format_exc(limit=4)
    return None


if __name__ == "__main__":
    results = {case.name: check(case, torch.device(sys.argv[1] if len(sys.argv) > 1 else "cpu")) for case in CASES}
    print(json.dumps(results))
