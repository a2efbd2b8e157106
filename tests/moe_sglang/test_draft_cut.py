"""Cutting draft trees at per-request depth K_i: no node at depth >= K_i keeps a child, shallower links unchanged."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_sglang.draft_cut import acceptable_tokens, cut_draft_trees, node_depths

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
