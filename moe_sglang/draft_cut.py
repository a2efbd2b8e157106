"""Per-request draft length in verification: cut each request's draft tree at depth K_i before acceptance runs.

SGLang drafts and verifies the same number of tokens for every request of a batch. Verification walks each request's
tree from the root through `retrieve_next_token` (first child) and `retrieve_next_sibling`, accepting one level per
matching draft (greedy, `verify_tree_greedy`) or per accepted sample (`tree_speculative_sampling_target_only`).
Clearing `retrieve_next_token` at every node of depth >= K_i ends that walk at depth K_i, so request i can accept at
most K_i drafts, and with K_i = 0 the root's bonus token is the target's own next token: plain decoding (issue 8).

Cutting alone saves no compute: the verify forward would still run every drafted token of every request. So a step
whose policies chose K_i below the drafted depth, or whose drafter found less than that (NGRAM has no draft at all
for most steps of text it has not seen repeated), also narrows the verify (`narrow_verify`): every request's tree is
cut down to its first W = max_i min(K_i, D_i) + 1 nodes (root included), D_i the depth of its draft tree. Parents
precede children in the node order, so the kept nodes form a tree again; for a chain they are exactly the first K
drafts, for a tree the first W - 1 drafts in node order (fewer siblings to choose from, still lossless:
verification accepts only what the target agrees with). The layout stays rectangular ([bs, W], what SGLang's
attention backends and result processing expect), so the batch pays for its deepest request: with one request, or
K chosen alike, verify work follows K exactly. A fully ragged verify (per-request lengths in extend_seq_lens, tree
masks and cache locations laid out per request, CUDA graphs per token-count bucket) is not done.
"""

from __future__ import annotations

import torch


def node_depths(next_token: list[list[int]], next_sibling: list[list[int]]) -> list[list[int]]:
    """Depth of every node of every request's tree (root = 0); -1 for nodes not reachable from the root."""
    depths = []
    for nxt, sib in zip(next_token, next_sibling, strict=True):
        depth = [-1] * len(nxt)
        depth[0] = 0
        stack = [0]
        while stack:
            node = stack.pop()
            child = nxt[node]
            while child != -1 and depth[child] == -1:
                depth[child] = depth[node] + 1
                stack.append(child)
                child = sib[child]
        depths.append(depth)
    return depths


def cut_draft_trees(
    next_token: torch.Tensor,  # [bs, n] first child of each node, -1 = none
    next_sibling: torch.Tensor,  # [bs, n] next sibling of each node, -1 = none
    max_depths: list[int],  # [bs] K_i: drafts request i may accept
    depths: list[list[int]] | None = None,  # node_depths of these links when the caller has them already
) -> torch.Tensor:
    """A copy of `next_token` in which no node of depth >= K_i has a child, on `next_token`'s device."""
    if next_token.dim() != 2 or next_token.shape != next_sibling.shape:
        raise ValueError(
            f"tree links must be [bs, n] alike, got {tuple(next_token.shape)}, {tuple(next_sibling.shape)}"
        )
    if len(max_depths) != next_token.shape[0]:
        raise ValueError(f"{len(max_depths)} draft lengths for a batch of {next_token.shape[0]}")
    if any(k < 0 for k in max_depths):
        raise ValueError(f"draft lengths must be >= 0, got {max_depths}")
    nxt = next_token.tolist()
    if depths is None:
        depths = node_depths(nxt, next_sibling.tolist())
    for row, depth, k in zip(nxt, depths, max_depths, strict=True):
        for node, d in enumerate(depth):
            if d >= k:
                row[node] = -1
    return torch.tensor(nxt, dtype=next_token.dtype).to(next_token.device, non_blocking=True)


def acceptable_tokens(
    next_token: torch.Tensor,  # [bs, n] first child of each node, -1 = none
    next_sibling: torch.Tensor,  # [bs, n] next sibling of each node, -1 = none
    max_depths: list[int],  # [bs] K_i
) -> torch.Tensor:
    """[bs * n] float: 1 for verify tokens at depth <= K_i (the root included), 0 for those that cannot be accepted."""
    depths = node_depths(next_token.tolist(), next_sibling.tolist())
    flags = [[1.0 if 0 <= d <= k else 0.0 for d in depth] for depth, k in zip(depths, max_depths, strict=True)]
    return torch.tensor(flags).reshape(-1).to(next_token.device, non_blocking=True)


def parents_precede_children(tree_mask: torch.Tensor) -> bool:
    """tree_mask [bs, n, n], [b, i, j] = node j is an ancestor of (or is) node i. True when every ancestor has a lower
    index, so the first W nodes of a tree are a tree again (NGRAM builds its trees so; checked, not assumed)."""
    return not bool(torch.triu(tree_mask.bool(), diagonal=1).any())


def narrow_verify(width: int, bs: int, n: int, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The verify inputs of a [bs, n] draft layout cut to its first `width` nodes per request.

    `tensors`: draft_tokens, positions, out_cache_loc ([bs * n]), tree_mask ([bs * n * n], the draft-only mask),
    retrieve_next_token and retrieve_next_sibling ([bs, n]). Children and siblings are linked in increasing index
    order (SGLang's reconstruct_indices_from_tree_mask), so dropping links to nodes >= width leaves exactly the links
    among the kept nodes. retrieve_index is rebuilt for the new stride."""
    if not 1 <= width <= n:
        raise ValueError(f"verify width must be in [1, {n}], got {width}")

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(bs, n)[:, :width].contiguous()

    def links(t: torch.Tensor) -> torch.Tensor:
        kept = rows(t)
        return torch.where(kept >= width, torch.full_like(kept, -1), kept)

    index = tensors["retrieve_next_token"]
    return {
        "draft_tokens": rows(tensors["draft_tokens"]).reshape(-1),
        "positions": rows(tensors["positions"]).reshape(-1),
        "out_cache_loc": rows(tensors["out_cache_loc"]).reshape(-1),
        "tree_mask": tensors["tree_mask"].reshape(bs, n, n)[:, :width, :width].contiguous().reshape(-1),
        "retrieve_next_token": links(tensors["retrieve_next_token"]),
        "retrieve_next_sibling": links(tensors["retrieve_next_sibling"]),
        "retrieve_index": (
            torch.arange(bs, device=index.device)[:, None] * width + torch.arange(width, device=index.device)
        ).to(index.dtype),
    }


def widen_rows(flat: torch.Tensor, bs: int, width: int, n: int) -> torch.Tensor:
    """[bs * width] -> [bs * n], each row padded with zeros: a narrowed step's accepted tokens in the [bs, n] stride
    that SGLang's scheduler and batch merging expect of this worker."""
    out = flat.new_zeros(bs, n)
    out[:, :width] = flat.reshape(bs, width)
    return out.reshape(-1)
