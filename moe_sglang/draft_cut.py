"""Per-request draft length in verification: cut each request's draft tree at depth K_i before acceptance runs.

SGLang drafts and verifies the same number of tokens for every request of a batch. Verification walks each request's
tree from the root through `retrieve_next_token` (first child) and `retrieve_next_sibling`, accepting one level per
matching draft (greedy, `verify_tree_greedy`) or per accepted sample (`tree_speculative_sampling_target_only`).
Clearing `retrieve_next_token` at every node of depth >= K_i ends that walk at depth K_i, so request i can accept at
most K_i drafts, and with K_i = 0 the root's bonus token is the target's own next token: plain decoding (issue 8).

What this does not do: save compute. The verify forward still runs every drafted token of every request (the batch
keeps one rectangular [bs, n] layout, the attention backend and CUDA graphs are built for it). Saving that work needs
a ragged verify: per-request draft_token_num in the verify input, extend_seq_lens of K_i + 1, cache locations and
tree masks laid out per request, and graphs captured per (bs, Σ K_i) bucket.
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
