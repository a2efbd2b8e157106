"""Token slots sorted by expert and padded into fixed-size blocks, so a grouped GEMM runs one expert per block.

Plain torch (no triton import): the layout is checked on its own in tests. A *slot* is one (token, choice) pair, numbered
`t * k + j` for `topk_ids[t, j]`. Slots on experts outside the budget mask get no block, which is how the fused kernel skips
masked experts entirely: their weights are never read (MoE-Spec).

No step here waits on the device: sizes come from shapes only (`max_blocks` is the worst case, unused blocks carry expert
-1 and exit at once), and the mask is read as a tensor. So the whole MoE call can be captured in a CUDA graph and the mask
changed between replays by writing into it — MoE-Spec's SGLang attempt lost its mask to a flag the graph had baked in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExpertBlocks:
    slot_ids: torch.Tensor  # [max_blocks * block_m] int32 slot numbers grouped by expert; padding holds num_slots
    block_expert: torch.Tensor  # [max_blocks] int32 expert computed by each block; -1 = unused block
    num_slots: int  # T * k, the padding sentinel (one past the last real slot)
    block_m: int  # slots per block


def max_blocks(num_slots: int, num_experts: int, block_m: int) -> int:
    """Worst-case block count: every expert's last block may be padding."""
    return -(-(num_slots + num_experts * (block_m - 1)) // block_m)


def sort_slots_by_expert(
    topk_ids: torch.Tensor, num_experts: int, block_m: int, expert_mask: torch.Tensor | None = None
) -> ExpertBlocks:
    """Group `topk_ids [T, k]` slots by expert (ascending id, stable within an expert), each group padded to `block_m`."""
    if block_m <= 0:
        raise ValueError(f"block_m must be positive, got {block_m}")
    device = topk_ids.device
    flat = topk_ids.reshape(-1).long()  # [S]
    num_slots = flat.numel()
    if expert_mask is not None:
        # Masked slots become a sentinel expert E: sorted last, counted apart, given no block.
        flat = torch.where(expert_mask.to(device)[flat], flat, num_experts)
    order = torch.sort(flat, stable=True).indices  # [S] slot numbers in expert order
    sorted_experts = flat[order]  # [S]

    counts = torch.zeros(num_experts + 1, dtype=torch.long, device=device).scatter_add_(0, flat, torch.ones_like(flat))
    counts = counts[:num_experts]  # [E] slots per expert, masked ones excluded
    blocks = (counts + block_m - 1) // block_m  # [E]
    padded_start = torch.cumsum(blocks * block_m, 0) - blocks * block_m  # [E] first padded position per expert
    start = torch.cumsum(counts, 0) - counts  # [E] first sorted position per expert

    total = max_blocks(num_slots, num_experts, block_m)
    dump = total * block_m  # one extra cell absorbs the masked slots, then is cut off
    expert = sorted_experts.clamp(max=num_experts - 1)
    rank = torch.arange(num_slots, device=device) - start[expert]
    position = torch.where(sorted_experts < num_experts, padded_start[expert] + rank, dump)
    slot_ids = torch.full((dump + 1,), num_slots, dtype=torch.int32, device=device)
    slot_ids[position] = order.to(torch.int32)

    block_index = torch.arange(total, device=device)
    block_expert = torch.searchsorted(torch.cumsum(blocks, 0), block_index, right=True)  # [max_blocks]
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return ExpertBlocks(slot_ids=slot_ids[:dump], block_expert=block_expert, num_slots=num_slots, block_m=block_m)
