"""Where a 1-16 token OLMoE-shaped masked fused MoE call spends its time on the GPU: the whole call with and without
an all-true mask, the block layout alone (with / without mask, without the L2 flush), a zero-fill + sum + cast like the
one the final per-token sum replaced, an empty graph, and a few launch / tile settings. Microseconds per CUDA-graph
replay (L2 flushed before each unless named), median of 50; one line per token count.

    python -m bench.gpu_breakdown     # CUDA only; the README's run: bench/results/gpu_evidence/breakdown.txt
"""

from __future__ import annotations

from functools import partial

import torch

from bench._gpu_moe import capture, median_ms
from service.kernels import moe_ref
from service.kernels.triton.align_blocks import align_blocks
from service.kernels.triton.fused_moe_masked import default_blocks, fused_moe_masked

EXPERTS, TOP_K, HIDDEN, INTER = 64, 8, 2048, 1024  # OLMoE-shaped, bf16
WARPS_STAGES = ((4, 3), (8, 3), (4, 2), (2, 3))
TILES_NK = ((32, 256), (16, 256), (32, 512))
REPS = 50  # timed replays per figure (median)


def graph_us(fn, flush: bool) -> float:
    """Median microseconds per CUDA-graph replay of `fn` (_gpu_moe's capture and timing; `flush`: L2 out first)."""
    return median_ms(torch.device("cuda"), capture(fn), REPS, flush) * 1e3


def row(tokens: int, w13: torch.Tensor, w2: torch.Tensor) -> dict[str, float]:
    dev = w13.device
    x = torch.randn(tokens, HIDDEN, device=dev).bfloat16()  # [T, H]
    ids, weights = moe_ref.route_topk(torch.randn(tokens, EXPERTS, device=dev), TOP_K, renormalize=False)  # [T, k]
    everything = torch.ones(EXPERTS, dtype=torch.bool, device=dev)
    block_m = default_blocks(ids.numel(), EXPERTS, dev)[0]
    call = partial(fused_moe_masked, x, w13, w2, ids, weights)
    out = {
        "full": graph_us(call, True),
        "mask_all": graph_us(partial(call, everything), True),
        "align": graph_us(partial(align_blocks, ids, EXPERTS, block_m), True),
        "align_mask": graph_us(partial(align_blocks, ids, EXPERTS, block_m, everything), True),
        "align_noflush": graph_us(partial(align_blocks, ids, EXPERTS, block_m), False),
        "zeros_sum": graph_us(partial(_zeros_sum, tokens, dev), True),
        "full_noflush": graph_us(call, False),
        "empty_graph": graph_us(lambda: None, True),
    }
    for warps, stages in WARPS_STAGES:
        out[f"w{warps}s{stages}"] = _or_failed(partial(call, num_warps=warps, num_stages=stages))
    for block_n, block_k in TILES_NK:
        out[f"n{block_n}k{block_k}"] = _or_failed(partial(call, block_n=block_n, block_k=block_k))
    return out


def _zeros_sum(tokens: int, dev: torch.device) -> torch.Tensor:
    return torch.zeros(tokens * TOP_K, HIDDEN, device=dev).view(tokens, TOP_K, HIDDEN).sum(1).bfloat16()


def _or_failed(fn) -> float:
    """-1 where the config does not run (a tile too large for shared memory fails when it compiles)."""
    try:
        return graph_us(fn, True)
    except Exception:
        return -1.0


def main() -> None:
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen, device=dev) * HIDDEN**-0.5).bfloat16()
    w2 = (torch.randn(EXPERTS, HIDDEN, INTER, generator=gen, device=dev) * INTER**-0.5).bfloat16()
    for tokens in (1, 2, 4, 8, 16):
        print(tokens, " ".join(f"{n}={v:.1f}" for n, v in row(tokens, w13, w2).items()), flush=True)


if __name__ == "__main__":
    main()
