"""The fused MoE's block layout (expert_blocks.py) built by ONE Triton program instead of ~30 small torch kernels.

On an H200 the torch layout took a fixed ~65 us per call inside a CUDA graph (bench/gpu_evidence.py, `sort_ms`), more
than the expert GEMMs of a 1-token OLMoE-shaped verify (64 experts, top-8; its weights stream in ~24 us): at small
verify sizes the layout, not the weights, set the layer's time. Same output as `sort_slots_by_expert`, bit for bit
(tested against it), so the GEMM kernels cannot tell which one ran. Like it, nothing here reads the device from the
host: shapes decide every size, so the call can be captured in a CUDA graph and the mask rewritten between replays.

One program, three passes over the slots (a verify has T * k <= a few hundred of them), experts held in registers as
a vector of `EXPERTS_P2` lanes (one lane per expert, lane E collects masked slots):
1. count: counts[e] = kept slots of expert e, summed chunk by chunk from one-hot rows;
2. place: slot s of expert e goes to padded_start[e] + (kept slots of e before s): the running per-expert count of
   earlier chunks plus an in-chunk rank from a [CHUNK, CHUNK] lower-triangular comparison: stable, like the sort;
3. blocks: block b belongs to the expert whose block range holds it (-1 past the last used block).
The padding fill of `slot_ids` comes first, separated from pass 2 by a barrier: both write the same cells.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from service.kernels.triton.expert_blocks import ExpertBlocks, max_blocks, sort_slots_by_expert

CHUNK = 64  # slots per pass step: the in-chunk rank is a [CHUNK, CHUNK] comparison
# Above this many slots the torch layout is faster: one program walks the slots serially (H200: 9.7 us at 128 slots,
# 38 us at 512, where the torch layout took 67-96 us; a 256-token x top-6 call's 1,536 slots made the masked and the
# full call equally slow). Verify batches (tokens x top-k) stay below it; prefill takes the torch layout.
MAX_SLOTS = 1024


@triton.jit
def _align_blocks(
    ids_ptr, mask_ptr, slot_ptr, block_expert_ptr,
    num_slots, num_experts, num_blocks,
    HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, EXPERTS_P2: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    lanes = tl.arange(0, EXPERTS_P2)  # [EP] expert ids; lane num_experts collects masked slots
    offs = tl.arange(0, CHUNK)  # [C]
    # pass 0: every cell of slot_ids is padding until a slot lands there
    for p0 in range(0, num_blocks * BLOCK_M, CHUNK):
        cells = p0 + offs
        tl.store(slot_ptr + cells, tl.full((CHUNK,), 0, tl.int32) + num_slots, mask=cells < num_blocks * BLOCK_M)
    # pass 1: kept slots per expert
    counts = tl.zeros((EXPERTS_P2,), dtype=tl.int32)
    for s0 in range(0, num_slots, CHUNK):
        expert = _chunk_experts(ids_ptr, mask_ptr, s0 + offs, num_slots, num_experts, HAS_MASK)  # [C]
        counts += tl.sum((expert[:, None] == lanes[None, :]).to(tl.int32), axis=0)
    counts = tl.where(lanes < num_experts, counts, 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M  # [EP] cells per expert
    padded_end = tl.cumsum(padded, axis=0)  # [EP]
    next_cell = padded_end - padded  # [EP] where each expert's next slot lands
    tl.debug_barrier()  # the padding fill is done before any slot overwrites a cell
    # pass 2: each kept slot to its expert's next cell, in slot order
    before = offs[None, :] < offs[:, None]  # [C, C] column j precedes row i
    for s0 in range(0, num_slots, CHUNK):
        slots = s0 + offs
        expert = _chunk_experts(ids_ptr, mask_ptr, slots, num_slots, num_experts, HAS_MASK)  # [C]
        onehot = (expert[:, None] == lanes[None, :]).to(tl.int32)  # [C, EP]
        rank = tl.sum(((expert[:, None] == expert[None, :]) & before).to(tl.int32), axis=1)  # [C] same expert earlier
        cell = tl.sum(onehot * next_cell[None, :], axis=1) + rank  # [C]
        tl.store(slot_ptr + cell, slots.to(tl.int32), mask=(slots < num_slots) & (expert < num_experts))
        next_cell += tl.sum(onehot, axis=0)
    # pass 3: the expert of each block; blocks past the last used one get -1
    block_end = tl.where(lanes < num_experts, padded_end // BLOCK_M, 2147483647)  # [EP] first block after expert e
    for b0 in range(0, num_blocks, CHUNK):
        blocks = b0 + offs
        owner = tl.sum((block_end[None, :] <= blocks[:, None]).to(tl.int32), axis=1)  # [C] experts ending before b
        owner = tl.where(owner < num_experts, owner, -1)
        tl.store(block_expert_ptr + blocks, owner.to(tl.int32), mask=blocks < num_blocks)


@triton.jit
def _chunk_experts(ids_ptr, mask_ptr, slots, num_slots, num_experts, HAS_MASK: tl.constexpr):
    """[C] the expert of each slot; num_experts for masked slots and for lanes past the last slot."""
    valid = slots < num_slots
    expert = tl.load(ids_ptr + slots, mask=valid, other=num_experts).to(tl.int32)
    if HAS_MASK:
        kept = tl.load(mask_ptr + expert, mask=valid, other=0) != 0
        expert = tl.where(kept, expert, num_experts)
    return tl.where(valid, expert, num_experts)


def expert_blocks(
    topk_ids: torch.Tensor, num_experts: int, block_m: int, expert_mask: torch.Tensor | None = None
) -> ExpertBlocks:
    """The fused MoE's layout by whichever builder is faster for its size (MAX_SLOTS): the size is a shape, so the
    choice is fixed at CUDA-graph capture."""
    if topk_ids.numel() > MAX_SLOTS:
        return sort_slots_by_expert(topk_ids, num_experts, block_m, expert_mask)
    return align_blocks(topk_ids, num_experts, block_m, expert_mask)


def align_blocks(
    topk_ids: torch.Tensor, num_experts: int, block_m: int, expert_mask: torch.Tensor | None = None
) -> ExpertBlocks:
    """`expert_blocks.sort_slots_by_expert` in one Triton program: topk_ids [T, k] (any integer dtype), mask [E] bool."""
    if block_m <= 0:
        raise ValueError(f"block_m must be positive, got {block_m}")
    num_slots = topk_ids.numel()
    total = max_blocks(num_slots, num_experts, block_m)
    device = topk_ids.device
    slot_ids = torch.empty(total * block_m, dtype=torch.int32, device=device)  # [max_blocks * block_m]
    block_expert = torch.empty(total, dtype=torch.int32, device=device)  # [max_blocks]
    ids = topk_ids.reshape(-1).contiguous()  # [T * k]
    mask = expert_mask.to(device).contiguous() if expert_mask is not None else ids  # bool [E]; unread without a mask
    _align_blocks[(1,)](
        ids, mask, slot_ids, block_expert,
        num_slots, num_experts, total,
        HAS_MASK=expert_mask is not None, BLOCK_M=block_m,
        EXPERTS_P2=triton.next_power_of_2(num_experts + 1), CHUNK=CHUNK,
    )  # fmt: skip
    return ExpertBlocks(slot_ids=slot_ids, block_expert=block_expert, num_slots=num_slots, block_m=block_m)
