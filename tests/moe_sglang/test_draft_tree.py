"""A draft tree grown from log-probabilities: chains, EAGLE-style frontiers, best-K selection, the dense layout."""

import math

import numpy as np
import pytest
import torch

from moe_sglang.draft_tree import DraftTree


def logprobs(*rows: dict[int, float], vocab: int = 8) -> torch.Tensor:
    """[rows, vocab] log-probabilities with the given token -> probability entries (the rest share what is left)."""
    out = torch.full((len(rows), vocab), -30.0)
    for i, row in enumerate(rows):
        for token, p in row.items():
            out[i, token] = math.log(p)
    return out


def test_a_chain_follows_the_argmax():
    tree = DraftTree(root_token=1, topk=1)
    tree.expand(logprobs({5: 0.9}))
    assert tree.frontier_paths() == [1]
    tree.expand(logprobs({6: 0.8}))
    assert [n.token for n in tree.nodes] == [1, 5, 6]
    assert tree.frontier_paths() == [1, 2], "the next forward runs the whole path below the root"
    assert tree.keep(2) == [1, 2] and tree.keep(1) == [1]


def test_the_frontier_is_the_best_topk_of_the_newest_depth():
    tree = DraftTree(root_token=0, topk=2)
    tree.expand(logprobs({3: 0.6, 4: 0.3}))  # nodes 1 (3), 2 (4)
    tree.expand(logprobs({5: 0.5, 6: 0.4}, {7: 0.9, 2: 0.05}))  # children of 1: 3 (5), 4 (6); of 2: 5 (7), 6 (2)
    scores = {n: round(math.exp(tree.nodes[n].score), 3) for n in range(3, 7)}
    assert scores == {3: 0.3, 4: 0.24, 5: 0.27, 6: 0.015}
    assert tree.frontier == [3, 5]
    assert tree.frontier_paths() == [1, 2, 3, 5]


def test_keep_is_the_best_nodes_closed_under_ancestors_breadth_first():
    tree = DraftTree(root_token=0, topk=2)
    tree.expand(logprobs({3: 0.6, 4: 0.3}))
    tree.expand(logprobs({5: 0.5, 6: 0.4}, {7: 0.9, 2: 0.05}))
    # by score: 1 (0.6), 2 (0.3), 3 (0.3), 5 (0.27), 4 (0.24)
    assert tree.keep(3) == [1, 2, 3]
    assert tree.keep(4) == [1, 2, 3, 5]
    assert tree.keep(10) == [1, 2, 3, 4, 5, 6]


def test_dense_row_lays_out_root_kept_nodes_and_padding():
    tree = DraftTree(root_token=9, topk=2)
    tree.expand(logprobs({3: 0.6, 4: 0.3}))
    tree.expand(logprobs({5: 0.5, 6: 0.4}, {7: 0.9, 2: 0.05}))
    tokens, mask = tree.dense_row(tree.keep(4), stride=6)
    assert tokens.tolist() == [9, 3, 4, 5, 7, 9]
    expected = np.eye(6, dtype=bool)
    for child, parent in ((1, 0), (2, 0), (3, 1), (4, 2)):
        expected[child] |= expected[parent]
    assert (mask == expected).all(), "each node sees its ancestors; padding sees only itself"
    with pytest.raises(ValueError):
        tree.dense_row(tree.keep(6), stride=4)
