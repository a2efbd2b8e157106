"""Cutting draft trees at per-request depth K_i: no node at depth >= K_i keeps a child, shallower links unchanged."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_sglang.draft_cut import (
    acceptable_tokens,
    cut_draft_trees,
    narrow_verify,
    node_depths,
    parents_precede_children,
    widen_rows,
)

# root 0 -> {1, 2}; 1 -> {3}; 3 -> {4}
TREE_NEXT = [1, 3, -1, 4, -1]
TREE_SIB = [-1, 2, -1, -1, -1]


@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (0, [-1, -1, -1, -1, -1]),
        (1, [1, -1, -1, -1, -1]),
        (2, [1, 3, -1, -1, -1]),
        (3, [1, 3, -1, 4, -1]),
        (9, [1, 3, -1, 4, -1]),
    ],
)
def test_tree_cut_table(k, expected):
    out = cut_draft_trees(torch.tensor([TREE_NEXT]), torch.tensor([TREE_SIB]), [k])
    assert out.tolist() == [expected]


def test_depths_of_a_tree():
    assert node_depths([TREE_NEXT], [TREE_SIB]) == [[0, 1, 1, 2, 3]]


def test_rows_are_cut_independently_and_input_is_untouched():
    chain = torch.tensor([[1, 2, 3, -1]] * 3, dtype=torch.int64)
    sib = torch.full((3, 4), -1, dtype=torch.int64)
    out = cut_draft_trees(chain, sib, [0, 3, 1])
    assert out.tolist() == [[-1, -1, -1, -1], [1, 2, 3, -1], [1, -1, -1, -1]]
    assert chain.tolist() == [[1, 2, 3, -1]] * 3 and out.dtype == chain.dtype


@pytest.mark.parametrize(
    ("next_token", "sibling", "ks", "message"),
    [
        (torch.zeros(2, 3), torch.zeros(2, 4), [1, 1], "alike"),
        (torch.zeros(2, 3), torch.zeros(2, 3), [1], "draft lengths for a batch"),
        (torch.zeros(1, 3), torch.zeros(1, 3), [-1], ">= 0"),
    ],
)
def test_bad_input(next_token, sibling, ks, message):
    with pytest.raises(ValueError, match=message):
        cut_draft_trees(next_token.long(), sibling.long(), ks)


@st.composite
def chains(draw):
    n = draw(st.integers(1, 8))
    return n, draw(st.integers(0, 10))


@settings(deadline=None, max_examples=50)
@given(chains())
def test_chain_walk_stops_at_k(case):
    n, k = case
    nxt = torch.tensor([[i + 1 if i + 1 < n else -1 for i in range(n)]])
    out = cut_draft_trees(nxt, torch.full((1, n), -1), [k])[0].tolist()
    walked, node = 0, 0
    while out[node] != -1:
        node, walked = out[node], walked + 1
    assert walked == min(k, n - 1)


def test_acceptable_tokens():
    nxt, sib = torch.tensor([TREE_NEXT, TREE_NEXT]), torch.tensor([TREE_SIB, TREE_SIB])
    assert acceptable_tokens(nxt, sib, [0, 2]).tolist() == [1, 0, 0, 0, 0, 1, 1, 1, 1, 0]


def tree_mask(next_token: list[int], next_sibling: list[int]) -> torch.Tensor:
    """[n, n] ancestor-or-self mask of one tree given by its links."""
    n = len(next_token)
    parent = [-1] * n
    for node in range(n):
        child = next_token[node]
        while child != -1:
            parent[child] = node
            child = next_sibling[child]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for node in range(n):
        a = node
        while a != -1:
            mask[node, a] = True
            a = parent[a]
    return mask


def test_narrowed_tree_is_the_same_tree_up_to_the_width():
    bs, n, width = 2, 5, 3
    nxt = torch.tensor([TREE_NEXT, [1, 2, 3, 4, -1]])
    sib = torch.tensor([TREE_SIB, [-1] * 5])
    masks = torch.stack([tree_mask(TREE_NEXT, TREE_SIB), tree_mask([1, 2, 3, 4, -1], [-1] * 5)])
    assert parents_precede_children(masks)
    tokens = torch.arange(100, 100 + bs * n)
    cut = narrow_verify(
        width,
        bs,
        n,
        {
            "draft_tokens": tokens,
            "positions": torch.arange(bs * n) % n + 7,
            "out_cache_loc": torch.arange(50, 50 + bs * n),
            "tree_mask": masks.reshape(-1),
            "retrieve_next_token": nxt,
            "retrieve_next_sibling": sib,
        },
    )
    assert cut["draft_tokens"].tolist() == [100, 101, 102, 105, 106, 107]
    assert cut["out_cache_loc"].tolist() == [50, 51, 52, 55, 56, 57]
    assert cut["positions"].tolist() == [7, 8, 9, 7, 8, 9]
    assert cut["retrieve_index"].tolist() == [[0, 1, 2], [3, 4, 5]]
    # tree: 0 -> {1, 2}, node 3 (child of 1) is gone; chain: 0 -> 1 -> 2 and 2's child is gone
    assert cut["retrieve_next_token"].tolist() == [[1, -1, -1], [1, 2, -1]]
    assert cut["retrieve_next_sibling"].tolist() == [[-1, 2, -1], [-1, -1, -1]]
    for b, (row_next, row_sib) in enumerate(zip(cut["retrieve_next_token"], cut["retrieve_next_sibling"], strict=True)):
        expected = tree_mask(row_next.tolist(), row_sib.tolist())
        assert torch.equal(cut["tree_mask"].reshape(bs, width, width)[b], expected)


def test_narrow_rejects_a_width_outside_the_draft():
    with pytest.raises(ValueError, match="verify width"):
        narrow_verify(0, 1, 4, {"retrieve_next_token": torch.zeros(1, 4, dtype=torch.int64)})


def test_parents_after_children_are_detected():
    mask = torch.eye(3, dtype=torch.bool)
    mask[0, 2] = True  # node 0's ancestor is node 2
    assert not parents_precede_children(mask[None])


def test_widen_rows_pads_each_request():
    out = widen_rows(torch.tensor([1, 2, 3, 4]), bs=2, width=2, n=4)
    assert out.tolist() == [1, 2, 0, 0, 3, 4, 0, 0]


def test_cut_with_known_depths_equals_cut_that_derives_them():
    nxt, sib = torch.tensor([TREE_NEXT] * 3), torch.tensor([TREE_SIB] * 3)
    known = node_depths(nxt.tolist(), sib.tolist())
    assert torch.equal(cut_draft_trees(nxt, sib, [0, 1, 2], known), cut_draft_trees(nxt, sib, [0, 1, 2]))
