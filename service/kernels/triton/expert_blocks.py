"""Token slots sorted by expert and padded into fixed-size blocks, so a grouped GEMM runs one expert per block.

Plain torch (no triton import): the layout is checked on its own in tests. A *slot* is one (token, choice) pair, numbered
`t * k + j` for `topk_ids[t, j]`. Slots on experts outside the budget mask are dropped here, which is how the fused kernel
skips masked experts entirely: no block is ever launched for them and their weights are never read (MoE-Spec).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExpertBlocks:
    slot_ids: torch.Tensor  # [num_blocks * block_m] int32 slot numbers grouped by expert; padding holds num_slots
    block_expert: torch.Tensor  # [num_blocks] int32 expert id computed by each block
    num_slots: int  # T * k, the padding sentinel (one past the last real slot)
    block_m: int  # slots per block


def sort_slots_by_expert(
    topk_ids: torch.Tensor, num_experts: int, block_m: int, expert_mask: torch.Tensor | None = None
) -> ExpertBlocks:
    """Group `topk_ids [T, k]` slots by expert (ascending id, stable within an expert), each group padded to `block_m`."""
    if block_m <= 0:
        raise ValueError(f"block_m must be positive, got {block_m}")
    flat = topk_ids.reshape(-1).long()  # [T*k]
    num_slots = flat.numel()
    slots = torch.arange(num_slots, device=flat.device)
    if expert_mask is not None:
        keep = expert_mask.to(flat.device)[flat]
        slots, flat = slots[keep], flat[keep]
    order = torch.sort(flat, stable=True).indices
    slots, flat = slots[order], flat[order]

    counts = torch.bincount(flat, minlength=num_experts)  # [E]
    blocks = (counts + block_m - 1) // block_m  # [E]
    padded_start = torch.cumsum(blocks * block_m, 0) - blocks * block_m  # [E] first padded position per expert
    start = torch.cumsum(counts, 0) - counts  # [E] first sorted position per expert
    position = padded_start[flat] + torch.arange(flat.numel(), device=flat.device) - start[flat]

    num_blocks = int(blocks.sum())
    slot_ids = torch.full((num_blocks * block_m,), num_slots, dtype=torch.int32, device=flat.device)
    slot_ids[position] = slots.to(torch.int32)
    block_expert = torch.repeat_interleave(torch.arange(num_experts, device=flat.device), blocks).to(torch.int32)
    return ExpertBlocks(slot_ids=slot_ids, block_expert=block_expert, num_slots=num_slots, block_m=block_m)
