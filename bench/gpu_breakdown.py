"""Where a 1-16 token OLMoE-shaped masked fused MoE call spends its time on the GPU: the whole call with and without
an all-true mask, the block layout alone (with / without mask, without the L2 flush), a zero-fill + sum + cast like the
one the final per-token sum replaced, an empty graph, and a few launch / tile settings. Microseconds per CUDA-graph
replay (L2 flushed before each unless named), median of 50; one line per token count.

    python -m bench.gpu_breakdown     # CUDA only; the README's run: bench/results/gpu_evidence/breakdown.txt
"""

from __future__ import annotations

import statistics
from functools import partial

import torch

from service.kernels import moe_ref
from service.kernels.triton.align_blocks import align_blocks
from service.kernels.triton.fused_moe_masked import default_blocks, fused_moe_masked

EXPERTS, TOP_K, HIDDEN, INTER = 64, 8, 2048, 1024  # OLMoE-shaped, bf16
WARPS_STAGES = ((4, 3), (8, 3), (4, 2), (2, 3))
TILES_NK = ((32, 256), (16, 256), (32, 512))


def graph_us(fn, flush: torch.Tensor | None, reps: int = 50) -> float:
    """Median microseconds per replay of `fn` captured in a CUDA graph; `flush` is zeroed before each (L2 out)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compiles outside the capture
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        if flush is not None:
            flush.zero_()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events) * 1e3


def row(tokens: int, w13: torch.Tensor, w2: torch.Tensor, flush: torch.Tensor) -> dict[str, float]:
    dev = w13.device
    x = torch.randn(tokens, HIDDEN, device=dev).bfloat16()  # [T, H]
    ids, weights = moe_ref.route_topk(torch.randn(tokens, EXPERTS, device=dev), TOP_K, renormalize=False)  # [T, k]
    everything = torch.ones(EXPERTS, dtype=torch.bool, device=dev)
    block_m = default_blocks(ids.numel(), EXPERTS, dev)[0]
    call = partial(fused_moe_masked, x, w13, w2, ids, weights)
    out = {
        "full": graph_us(call, flush),
        "mask_all": graph_us(partial(call, everything), flush),
        "align": graph_us(partial(align_blocks, ids, EXPERTS, block_m), flush),
        "align_mask": graph_us(partial(align_blocks, ids, EXPERTS, block_m, everything), flush),
        "align_noflush": graph_us(partial(align_blocks, ids, EXPERTS, block_m), None),
        "zeros_sum": graph_us(partial(_zeros_sum, tokens, dev), flush),
        "full_noflush": graph_us(call, None),
        "empty_graph": graph_us(lambda: None, flush),
    }
    for warps, stages in WARPS_STAGES:
        out[f"w{warps}s{stages}"] = _or_failed(partial(call, num_warps=warps, num_stages=stages), flush)
    for block_n, block_k in TILES_NK:
        out[f"n{block_n}k{block_k}"] = _or_failed(partial(call, block_n=block_n, block_k=block_k), flush)
    return out


def _zeros_sum(tokens: int, dev: torch.device) -> torch.Tensor:
    return torch.zeros(tokens * TOP_K, HIDDEN, device=dev).view(tokens, TOP_K, HIDDEN).sum(1).bfloat16()


def _or_failed(fn, flush: torch.Tensor) -> float:
    """-1 where the config does not run (a tile too large for shared memory fails when it compiles)."""
    try:
        return graph_us(fn, flush)
    except Exception:
        return -1.0


def main() -> None:
    dev = torch.device("cuda")
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev)  # larger than the L2
    gen = torch.Generator(device=dev).manual_seed(0)
    w13 = (torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=gen, device=dev) * HIDDEN**-0.5).bfloat16()
    w2 = (torch.randn(EXPERTS, HIDDEN, INTER, generator=gen, device=dev) * INTER**-0.5).bfloat16()
    for tokens in (1, 2, 4, 8, 16):
        print(tokens, " ".join(f"{n}={v:.1f}" for n, v in row(tokens, w13, w2, flush).items()), flush=True)


if __name__ == "__main__":
    main()
