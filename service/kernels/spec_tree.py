"""Draft-token trees for verification: build them from EAGLE draft selections or recover them from an NGRAM mask.

Both ops describe a tree of n draft tokens per request (node 0 = the last verified token, parents before children) by
  - retrive_index[b, i] = b*n + i (flat slot of node i),
  - retrive_next_token[b, i] = smallest child of i, retrive_next_sibling[b, i] = next larger sibling (-1 = none),
  - positions[b*n + i] = verified_seq_len[b] + depth(i),
  - (build only) the tree attention mask: node i sees node 0, itself and its ancestors.
Written vectorised over [bs, n, n]; n is the draft token count (tens), so the cubic cost is negligible.
"""

import numpy as np
import torch

from service.kernels._checks import require

FULL_MASK = 0  # tree mask rows also carry the seq_len prefix columns (GPU kernels)
QLEN_ONLY = 1  # tree mask is [bs, n, n] (the CPU intel_amx attention path)


def tree_links(parent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First child and next sibling of every node, from parent indices (-1 = no parent)."""
    # parent: [bs, n]
    bs, n = parent.shape
    idx = torch.arange(n, device=parent.device)
    big = torch.full((), n, device=parent.device)
    is_child = parent[:, None, :] == idx[None, :, None]  # [bs, p, c]: c is a child of p
    first_child = torch.where(is_child, idx, big).amin(-1)  # [bs, n]
    same_parent = (parent[:, :, None] == parent[:, None, :]) & (parent[:, :, None] >= 0)  # [bs, i, j]
    later = idx[None, :] > idx[:, None]  # [i, j]: j > i
    next_sibling = torch.where(same_parent & later, idx, big).amin(-1)  # [bs, n]
    minus_one = torch.full((), -1, device=parent.device)
    return torch.where(first_child == n, minus_one, first_child), torch.where(
        next_sibling == n, minus_one, next_sibling
    )


def ancestor_mask(parent: torch.Tensor) -> torch.Tensor:
    """[bs, n, n] bool: row i marks i itself and every node on its parent chain."""
    # parent: [bs, n]
    bs, n = parent.shape
    mask = torch.eye(n, dtype=torch.bool, device=parent.device).expand(bs, n, n).clone()
    rows = torch.arange(n, device=parent.device).expand(bs, n)
    batch = torch.arange(bs, device=parent.device)[:, None].expand(bs, n)
    cur = parent.clone()
    for _ in range(n - 1):  # a chain is at most n-1 edges long
        valid = cur >= 0
        if not bool(valid.any()):
            break
        mask[batch[valid], rows[valid], cur[valid]] = True
        cur = torch.where(valid, torch.gather(parent, 1, cur.clamp_min(0)), cur)
    return mask


def eagle_parents(
    parent_list: torch.Tensor, selected_index: torch.Tensor, topk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tree parents from EAGLE's draft selection; (parent node, parent-was-found flag).

    Node i+1 is draft candidate selected_index[i]; a candidate c hangs under parent_list[c // topk] (a candidate index)
    or under the root when c // topk == 0. A parent that was not selected leaves the node detached (found = False).
    """
    # parent_list: [bs, topk*(depth-1)+1], selected_index: [bs, n-1]
    bs, m = selected_index.shape
    sel = selected_index.long()
    parent_tb = sel // topk  # [bs, n-1]
    from_root = parent_tb == 0
    width = parent_list.shape[1]
    parent_cand = torch.gather(parent_list.long(), 1, parent_tb.clamp(0, max(width - 1, 0))) if width else sel * 0
    hits = sel[:, None, :] == parent_cand[:, :, None]  # [bs, child, candidate position]
    found = hits.any(-1)
    parent_node = torch.where(from_root, 0, torch.where(found, hits.int().argmax(-1) + 1, -1))  # [bs, n-1]
    root = torch.full((bs, 1), -1, dtype=torch.long, device=sel.device)
    root_found = torch.ones((bs, 1), dtype=torch.bool, device=sel.device)
    return torch.cat([root, parent_node], 1), torch.cat([root_found, from_root | found], 1)


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,  # [bs, topk*(depth-1)+1]
    selected_index: torch.Tensor,  # [bs, n-1]
    verified_seq_len: torch.Tensor,  # [bs]
    tree_mask: torch.Tensor,  # bool, written: QLEN_ONLY [bs*n*n]; FULL_MASK [sum(seq_len)*n + bs*n*n]
    positions: torch.Tensor,  # [bs*n], written
    retrive_index: torch.Tensor,  # [bs, n], written
    retrive_next_token: torch.Tensor,  # [bs, n], written (caller pre-fills -1)
    retrive_next_sibling: torch.Tensor,  # [bs, n], written (caller pre-fills -1)
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    op = "build_tree_kernel_efficient_cpu"
    require(tree_mask_mode in (FULL_MASK, QLEN_ONLY), op, f"tree_mask_mode {tree_mask_mode} is not supported on CPU")
    require(tree_mask.dtype == torch.bool, op, "tree_mask must be bool")
    bs, n = verified_seq_len.numel(), draft_token_num
    require(selected_index.shape == (bs, n - 1), op, f"selected_index must be [{bs}, {n - 1}]")
    parent, found = eagle_parents(parent_list, selected_index, topk)
    # A detached node keeps no link to its missing parent (the kernels skip it the same way).
    linked_parent = torch.where(found, parent, -1)
    next_token, next_sibling = tree_links(linked_parent)
    anc = ancestor_mask(linked_parent)  # [bs, n, n]
    anc[:, :, 0] = True
    node_depth = anc[:, :, 1:].sum(-1)  # [bs, n] nodes on the path below the root, the node itself included
    seq = verified_seq_len.long()

    retrive_index.copy_(torch.arange(bs * n, device=parent.device).view(bs, n))
    retrive_next_token.copy_(next_token)
    retrive_next_sibling.copy_(next_sibling)
    positions.copy_((seq[:, None] + node_depth).reshape(-1))
    if tree_mask_mode == QLEN_ONLY:
        tree_mask[: bs * n * n] = anc.reshape(-1)
        return
    # FULL_MASK: request b's rows are (seq_len_b + n) wide and start after all earlier requests' rows.
    offset = 0
    for b, seq_len in enumerate(seq.tolist()):
        rows = tree_mask[offset : offset + n * (seq_len + n)].view(n, seq_len + n)
        rows[:, seq_len:] = anc[b]
        offset += n * (seq_len + n)


def reconstruct_indices_from_tree_mask_cpu(
    tree_mask: torch.Tensor,  # [bs*n*n] bool; row i marks i's ancestors (and itself)
    verified_seq_len: torch.Tensor,  # [bs]
    positions: torch.Tensor,  # [bs*n], written
    retrive_index: torch.Tensor,  # [bs, n], written
    retrive_next_token: torch.Tensor,  # [bs, n], written
    retrive_next_sibling: torch.Tensor,  # [bs, n], written
    batch_size: int,
    draft_token_num: int,
) -> None:
    """Recover tree links from an NGRAM ancestor mask: parent(i) = the largest ancestor j < i."""
    op = "reconstruct_indices_from_tree_mask_cpu"
    bs, n = batch_size, draft_token_num
    require(tree_mask.numel() >= bs * n * n, op, f"tree_mask must hold bs*n*n = {bs * n * n} entries")
    mask = tree_mask.reshape(-1)[: bs * n * n].view(bs, n, n).bool()
    idx = torch.arange(n, device=mask.device)
    ancestors = mask & (idx[None, :] < idx[:, None])  # [bs, i, j], j < i
    depth = ancestors.sum(-1)  # [bs, n]
    parent = torch.where(ancestors.any(-1), torch.where(ancestors, idx, -1).amax(-1), -1)  # [bs, n]
    # First "child" is the first later node that has this node among its ancestors (the compiled op's definition).
    big = torch.full((), n, device=mask.device)
    first_desc = torch.where(ancestors.transpose(1, 2), idx, big).amin(-1)  # [bs, n]
    _, next_sibling = tree_links(parent)
    retrive_index.copy_(torch.arange(bs * n, device=mask.device).view(bs, n))
    retrive_next_token.copy_(torch.where(first_desc == n, -1, first_desc))
    retrive_next_sibling.copy_(next_sibling)
    positions.copy_((verified_seq_len.long()[:bs, None] + depth).reshape(-1))


def reconstruct_indices_from_tree_mask_host(
    mask: np.ndarray, verified_seq_len: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """reconstruct_indices_from_tree_mask_cpu on host arrays, for a caller whose trees are host arrays already (the CPU
    engine's draft trees, moe_sglang/verify.py): `mask` [bs, n, n] bool, `verified_seq_len` [bs]; returns positions
    [bs*n], retrive_index, retrive_next_token, retrive_next_sibling [bs, n] (int64), the op's outputs. On a handful
    of nodes the op's ~20 tensor ops took 185-199 us alone and ~0.45 ms of a 22-25 ms batch-1 STANDALONE step on
    moe-fine x48 (py-spy), these numpy ones 45-49 us alone (one thread, AVX2 EPYC, batch 1 and 8, chains of 4)."""
    bs, n, _ = mask.shape
    idx = np.arange(n)
    ancestors = mask & (idx[None, :] < idx[:, None])  # [bs, i, j], j < i
    depth = ancestors.sum(-1)
    parent = np.where(ancestors.any(-1), np.where(ancestors, idx, -1).max(-1), -1)  # [bs, n]
    first_desc = np.where(ancestors.transpose(0, 2, 1), idx, n).min(-1)  # first later node below each node
    same_parent = (parent[:, :, None] == parent[:, None, :]) & (parent[:, :, None] >= 0) & (idx[None, :] > idx[:, None])
    next_sibling = np.where(same_parent, idx, n).min(-1)
    positions = (np.asarray(verified_seq_len, dtype=np.int64)[:, None] + depth).reshape(-1)
    retrive_index = np.arange(bs * n, dtype=np.int64).reshape(bs, n)
    return (
        positions,
        retrive_index,
        np.where(first_desc == n, -1, first_desc),
        np.where(next_sibling == n, -1, next_sibling),
    )
