"""One request's draft tree, grown depth by depth from a draft model's log-probabilities, the way SGLang's EAGLE /
STANDALONE drafter grows it: the children of a node are the draft's top-`topk` tokens after it, scored by the path's
summed log-probability; the nodes expanded at the next depth (the frontier) are the `topk` best of the newest depth;
the tree kept is the best `budget` nodes by score (SGLang keeps `num_draft_tokens - 1`; here the request's own K),
ancestors always included. Nodes are numbered breadth-first (depth, then creation order): parents precede children,
which is what lets a verify keep the first L nodes of a tree (ragged.py). With topk = 1 it is a chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class DraftNode:
    token: int
    parent: int  # index in DraftTree.nodes; -1 for the root
    depth: int  # root = 0
    score: float  # summed log-probability of the path from the root


@dataclass
class DraftTree:
    root_token: int
    topk: int  # children per expanded node (1 = a chain)
    nodes: list[DraftNode] = field(default_factory=list)  # nodes[0] = root
    frontier: list[int] = field(default_factory=list)  # nodes to expand at the next depth

    def __post_init__(self) -> None:
        self.nodes = [DraftNode(self.root_token, -1, 0, 0.0)]
        self.frontier = [0]

    @property
    def depth(self) -> int:
        return self.nodes[-1].depth

    def path(self, node: int) -> list[int]:
        """Node indices from the first draft below the root down to `node` (root excluded)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.nodes[node].parent
        return out[::-1]

    def frontier_paths(self) -> list[int]:
        """The union of the frontier's paths (root excluded), breadth-first: the nodes a forward must run so that
        every frontier node sees exactly its ancestors."""
        keep = {n for f in self.frontier for n in self.path(f)}
        return sorted(keep, key=lambda n: (self.nodes[n].depth, n))

    def expand(self, logprobs: torch.Tensor) -> None:
        """`logprobs` [len(frontier), V]: the draft's next-token log-probabilities after each frontier node. Adds the
        top-`topk` children of every frontier node; the new frontier is the best `topk` of them."""
        values, tokens = logprobs.float().topk(self.topk, dim=-1)  # [F, topk]
        new = []
        for row, parent in enumerate(self.frontier):
            base = self.nodes[parent]
            for value, token in zip(values[row].tolist(), tokens[row].tolist(), strict=True):
                new.append(len(self.nodes))
                self.nodes.append(DraftNode(int(token), parent, base.depth + 1, base.score + float(value)))
        self.frontier = sorted(new, key=lambda n: -self.nodes[n].score)[: self.topk]

    def keep(self, budget: int) -> list[int]:
        """The best `budget` draft nodes by score, closed under ancestors, breadth-first (root excluded)."""
        ranked = sorted(range(1, len(self.nodes)), key=lambda n: (-self.nodes[n].score, self.nodes[n].depth, n))
        chosen = set()
        for node in ranked[:budget]:
            chosen.update(self.path(node))
        return sorted(chosen, key=lambda n: (self.nodes[n].depth, n))[:budget]

    def dense_row(self, kept: list[int], stride: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens [stride], mask [stride, stride]) in SGLang's dense draft layout: root, the kept nodes, then padding
        nodes (the root's token, seeing only themselves)."""
        if len(kept) + 1 > stride:
            raise ValueError(f"{len(kept)} drafts do not fit {stride - 1} slots")
        tokens = np.full(stride, self.root_token, dtype=np.int64)
        mask = np.eye(stride, dtype=bool)
        slot = {0: 0}
        for i, node in enumerate(kept, start=1):
            slot[node] = i
            tokens[i] = self.nodes[node].token
            mask[i] = mask[slot[self.nodes[node].parent]]
            mask[i, i] = True
        return tokens, mask
