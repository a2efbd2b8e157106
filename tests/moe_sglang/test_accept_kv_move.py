"""moe_sglang.accept.kv_in_place: when SGLang's KV move after a verify would copy every slot onto itself."""

import pytest
import torch

from moe_sglang.accept import kv_in_place

# 3 requests, windows of 4 verify slots (root + 3 drafts); accept_index as eagle_sample leaves it: the accepted
# nodes' flat indices in order, -1 after
CHAIN = torch.tensor([[0, 1, 2, -1], [4, -1, -1, -1], [8, 9, 10, 11]])
LENS = torch.tensor([3, 1, 4], dtype=torch.int32)


def test_a_chains_accepted_drafts_are_in_place():
    assert kv_in_place(CHAIN, LENS, window=4)


@pytest.mark.parametrize(
    "index",
    [
        [[0, 2, 3, -1], [4, -1, -1, -1], [8, 9, 10, 11]],  # a tree's second branch accepted: slots 2, 3 move to 1, 2
        [[0, 1, 2, -1], [4, 5, -1, -1], [8, 9, 10, 11]],  # an entry past accept_lens that SGLang would move too
        [[0, 1, 2, -1], [4, -1, -1, -1], [9, 10, 11, -1]],  # a window that does not start at its head
    ],
)
def test_anything_else_is_moved(index):
    assert not kv_in_place(torch.tensor(index), LENS, window=4)


def test_windows_are_the_dense_layouts_stride():
    """Rows of the dense layout are `window` slots apart, whatever accept_index's width."""
    assert kv_in_place(torch.tensor([[0, 1], [5, -1]]), torch.tensor([2, 1]), window=5)
    assert not kv_in_place(torch.tensor([[0, 1], [2, -1]]), torch.tensor([2, 1]), window=5)
