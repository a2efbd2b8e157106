"""Tree construction ops vs per-node references built from explicit parent arrays."""

import random

import numpy as np
import pytest
import torch

from service.kernels.spec_tree import (
    FULL_MASK,
    QLEN_ONLY,
    build_tree_kernel_efficient_cpu,
    reconstruct_indices_from_tree_mask_cpu,
    reconstruct_indices_from_tree_mask_host,
)
from tests.kernels._trees import ancestors_with_self, children, eagle_draft, random_parents


def _expected_links(parents: list[int]):
    n = len(parents)
    next_token = [min(children(parents, p), default=-1) for p in range(n)]
    next_sibling = []
    for c in range(n):
        later = [s for s in children(parents, parents[c]) if s > c] if parents[c] >= 0 else []
        next_sibling.append(min(later, default=-1))
    depth = [len(ancestors_with_self(parents, i)) - 1 for i in range(n)]
    return next_token, next_sibling, depth


def _run_build(parent_lists, selected, seq_lens, topk, depth, n, mode):
    bs = len(seq_lens)
    mask_len = bs * n * n + (sum(seq_lens) * n if mode == FULL_MASK else 0)
    tree_mask = torch.ones(mask_len, dtype=torch.bool)
    positions = torch.empty(bs * n, dtype=torch.long)
    ri, nt, ns = torch.full((3, bs, n), -1, dtype=torch.long)
    build_tree_kernel_efficient_cpu(
        torch.tensor(parent_lists),
        torch.tensor(selected),
        torch.tensor(seq_lens),
        tree_mask,
        positions,
        ri,
        nt,
        ns,
        topk,
        depth,
        n,
        mode,
    )
    return tree_mask, positions, ri, nt, ns


def test_build_tree_hand_example():
    # topk=2, depth=2: candidates 0,1 under the root, 2..5 under them; selecting [0, 1, 2] puts 2 under node 1.
    mask, positions, ri, nt, ns = _run_build([[-1, 0, 1]], [[0, 1, 2]], [5], topk=2, depth=2, n=4, mode=QLEN_ONLY)
    assert ri.tolist() == [[0, 1, 2, 3]]
    assert nt.tolist() == [[1, 3, -1, -1]]
    assert ns.tolist() == [[-1, 2, -1, -1]]
    assert positions.tolist() == [5, 6, 6, 7]
    expected_mask = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    assert mask.view(4, 4).int().tolist() == expected_mask


@pytest.mark.parametrize(
    ("seed", "bs", "topk", "depth", "n"), [(0, 1, 1, 3, 4), (1, 2, 2, 3, 6), (2, 3, 4, 4, 8), (3, 2, 3, 5, 12)]
)
@pytest.mark.parametrize("mode", [QLEN_ONLY, FULL_MASK])
def test_build_tree_matches_simulated_eagle_tree(seed, bs, topk, depth, n, mode):
    rng = random.Random(seed)
    drafts = [eagle_draft(rng, topk, depth, n) for _ in range(bs)]
    seq_lens = [rng.randrange(1, 9) for _ in range(bs)]
    mask, positions, ri, nt, ns = _run_build(
        [d[0] for d in drafts], [d[1] for d in drafts], seq_lens, topk, depth, n, mode
    )
    offset = 0
    for b, (_, _, parents) in enumerate(drafts):
        next_token, next_sibling, node_depth = _expected_links(parents)
        assert ri[b].tolist() == list(range(b * n, (b + 1) * n))
        assert nt[b].tolist() == next_token
        assert ns[b].tolist() == next_sibling
        assert positions[b * n : (b + 1) * n].tolist() == [seq_lens[b] + d for d in node_depth]
        width = n + (seq_lens[b] if mode == FULL_MASK else 0)
        rows = mask[offset : offset + n * width].view(n, width)
        offset += n * width
        for i in range(n):
            visible = {0, *ancestors_with_self(parents, i)}
            assert rows[i, width - n :].tolist() == [j in visible for j in range(n)]
            assert bool(rows[i, : width - n].all())  # FULL_MASK prefix columns stay as the caller filled them


def test_build_tree_rejects_bitpacked_mode():
    with pytest.raises(ValueError, match="tree_mask_mode"):
        _run_build([[-1, 0, 1]], [[0, 1, 2]], [5], topk=2, depth=2, n=4, mode=2)


def _loop_reconstruct(mask, n):
    """The definitions, one node at a time: parent = last ancestor before it, first child = first later descendant."""
    parent = [max((j for j in range(i) if mask[i][j]), default=-1) for i in range(n)]
    depth = [sum(mask[i][j] for j in range(i)) for i in range(n)]
    first = [next((k for k in range(t + 1, n) if mask[k][t]), -1) for t in range(n)]
    sibling = [
        next((k for k in range(t + 1, n) if parent[k] == parent[t]), -1) if parent[t] >= 0 else -1 for t in range(n)
    ]
    return depth, first, sibling


@pytest.mark.parametrize(("seed", "bs", "n"), [(0, 1, 1), (1, 2, 4), (2, 3, 8), (3, 4, 16)])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_reconstruct_matches_loop_definitions(seed, bs, n, index_dtype):
    rng = random.Random(seed)
    trees = [random_parents(rng, n) for _ in range(bs)]
    masks = [[[j in ancestors_with_self(p, i) for j in range(n)] for i in range(n)] for p in trees]
    seq = torch.tensor([rng.randrange(0, 20) for _ in range(bs)], dtype=index_dtype)
    positions = torch.empty(bs * n, dtype=index_dtype)
    ri, nt, ns = torch.empty((3, bs, n), dtype=index_dtype)
    reconstruct_indices_from_tree_mask_cpu(torch.tensor(masks).flatten(), seq, positions, ri, nt, ns, bs, n)
    for b in range(bs):
        depth, first, sibling = _loop_reconstruct(masks[b], n)
        assert ri[b].tolist() == list(range(b * n, (b + 1) * n))
        assert positions[b * n : (b + 1) * n].tolist() == [int(seq[b]) + d for d in depth]
        assert nt[b].tolist() == first
        assert ns[b].tolist() == sibling


@pytest.mark.parametrize("seed", range(3))
def test_reconstruct_inverts_build(seed):
    """Recovering the links from build's QLEN mask gives build's own links (the NGRAM and EAGLE paths agree)."""
    rng = random.Random(seed)
    bs, topk, depth, n = 2, 3, 4, 10
    drafts = [eagle_draft(rng, topk, depth, n) for _ in range(bs)]
    mask, positions, _, nt, ns = _run_build(
        [d[0] for d in drafts], [d[1] for d in drafts], [3, 7], topk, depth, n, QLEN_ONLY
    )
    positions2 = torch.empty_like(positions)
    ri2, nt2, ns2 = torch.empty((3, bs, n), dtype=torch.long)
    reconstruct_indices_from_tree_mask_cpu(mask, torch.tensor([3, 7]), positions2, ri2, nt2, ns2, bs, n)
    assert torch.equal(positions, positions2) and torch.equal(nt, nt2) and torch.equal(ns, ns2)


@pytest.mark.parametrize(("seed", "bs", "n"), [(0, 1, 1), (1, 2, 4), (2, 3, 8), (3, 4, 16)])
def test_reconstruct_on_host_arrays_equals_the_op(seed, bs, n):
    """The numpy twin the CPU engine's verify calls with its host trees gives the op's outputs, padding nodes (a
    row that sees only itself) and chains included."""
    rng = random.Random(seed)
    trees = [random_parents(rng, n) for _ in range(bs)] + [[-1] + list(range(n - 1)), [-1] * n]
    masks = [[[j in ancestors_with_self(p, i) for j in range(n)] for i in range(n)] for p in trees]
    seq = [rng.randrange(0, 20) for _ in trees]
    rows = len(trees)
    positions = torch.empty(rows * n, dtype=torch.int64)
    ri, nt, ns = torch.empty((3, rows, n), dtype=torch.int64)
    reconstruct_indices_from_tree_mask_cpu(
        torch.tensor(masks).flatten(), torch.tensor(seq), positions, ri, nt, ns, rows, n
    )
    host = reconstruct_indices_from_tree_mask_host(np.array(masks), np.array(seq))
    for mine, op in zip(host, (positions, ri, nt, ns), strict=True):
        assert mine.tolist() == op.tolist()
