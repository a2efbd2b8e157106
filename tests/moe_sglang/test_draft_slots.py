"""moe_sglang.draft_model._slots: the draft KV slot of every token of a draft forward's parts."""

from types import SimpleNamespace

import torch

from moe_sglang.draft_model import _slots


def test_slots_are_the_tables_entries_at_each_requests_pool_row_and_position():
    table = torch.arange(18 * 300, dtype=torch.int32).reshape(18, 300).flip(1).contiguous()
    batch = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(req_to_token=table), req_pool_indices=torch.tensor([5, 2, 9])
    )
    drafting = [SimpleNamespace(row=0), SimpleNamespace(row=2)]  # batch rows 0 and 2: pool rows 5 and 9
    parts = [SimpleNamespace(slot_positions=[100, 101]), SimpleNamespace(slot_positions=[57])]
    slots = _slots(batch, drafting, parts)
    assert slots.dtype == torch.int64
    assert slots.tolist() == [int(table[5, 100]), int(table[5, 101]), int(table[9, 57])]
