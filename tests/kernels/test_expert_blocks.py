"""The expert-sorted, block-padded slot layout the fused Triton MoE kernel runs on (torch only, no triton needed)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels.triton.expert_blocks import max_blocks, sort_slots_by_expert

IDS = torch.tensor([[0, 2], [2, 1], [0, 0]])  # slots 0..5 → experts 0, 2, 2, 1, 0, 0
PAD = 6


@pytest.mark.parametrize(
    ("mask", "slot_ids", "block_expert"),
    [
        (None, [0, 4, 5, PAD, 3, PAD, 1, 2, PAD, PAD], [0, 0, 1, 2, -1]),
        ([False, True, True], [3, PAD, 1, 2] + [PAD] * 6, [1, 2, -1, -1, -1]),
        ([False, False, False], [PAD] * 10, [-1] * 5),
    ],
)
def test_hand_made_layout(mask, slot_ids, block_expert):
    expert_mask = None if mask is None else torch.tensor(mask)
    blocks = sort_slots_by_expert(IDS, num_experts=3, block_m=2, expert_mask=expert_mask)
    assert blocks.slot_ids.tolist() == slot_ids
    assert blocks.block_expert.tolist() == block_expert
    assert blocks.num_slots == PAD


@given(
    tokens=st.integers(0, 12),
    experts=st.integers(1, 6),
    block_m=st.sampled_from([1, 2, 4, 16]),
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_every_kept_slot_lands_once_in_a_block_of_its_expert(tokens, experts, block_m, data):
    k = data.draw(st.integers(1, experts))
    ids = torch.tensor(
        data.draw(
            st.lists(st.lists(st.integers(0, experts - 1), min_size=k, max_size=k), min_size=tokens, max_size=tokens)
        ),
        dtype=torch.long,
    ).reshape(tokens, k)
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=experts, max_size=experts)))
    blocks = sort_slots_by_expert(ids, experts, block_m, mask)

    assert blocks.block_expert.numel() == max_blocks(tokens * k, experts, block_m)
    grid = blocks.slot_ids.view(-1, block_m)  # [blocks, block_m]
    seen = []
    for block, expert in zip(grid.tolist(), blocks.block_expert.tolist(), strict=True):
        real = [s for s in block if s != blocks.num_slots]
        if expert == -1:
            assert real == []
            continue
        assert mask[expert]
        assert all(int(ids.view(-1)[s]) == expert for s in real)
        seen += real
    kept = [s for s in range(tokens * k) if mask[ids.view(-1)[s]]]
    assert sorted(seen) == kept


def test_bad_block_size_is_rejected():
    with pytest.raises(ValueError, match="block_m"):
        sort_slots_by_expert(IDS, 3, 0)
