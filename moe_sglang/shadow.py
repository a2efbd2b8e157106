"""Acceptance measured for free: drafts the NGRAM step looked up for a request that then ran at K = 0, judged against
the tokens the target emitted afterwards.

NGRAM's lookup runs for every request that may draft (it costs the same whatever K, ngram_worker.py), so at K = 0 a
draft is in hand and discarded. Kept here instead, it is walked one emitted token per step: the draft tree's node
whose token equals the token emitted is followed (what a greedy verify of that draft would have accepted), until a
token matches none of the current node's children (a rejection at that depth) or a leaf is reached (all accepted).
The outcome goes to the policies in StepStats.shadow, in a verify's terms (positions judged, positions accepted), so
a request kept at K = 0 keeps measuring its acceptance without probes. One draft is judged at a time per request; a
request that verifies drafts of its own (K > 0) drops the one it was judging: its verify measures the real thing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.policy import ShadowOutcome


@dataclass
class _Walk:
    """A draft tree being judged: node 0 = the root (the request's last token before the draft)."""

    tokens: np.ndarray  # [n] token of each node
    parent: np.ndarray  # [n] parent node; -1 for the root and for padding nodes (not drafts)
    draft_depth: int  # drafts in the tree when it was built (RequestView.draft_depth)
    node: int = 0  # the node the emitted tokens have reached
    matched: int = 0  # emitted tokens that matched so far (= depth of `node`)

    def advance(self, token: int) -> tuple[int, int] | None:
        """One emitted token; (positions judged, positions accepted) once the walk has ended, None while it goes on."""
        children = np.flatnonzero(self.parent == self.node)
        hit = children[self.tokens[children] == token]
        if hit.size == 0:
            return self.matched + 1, self.matched
        self.node, self.matched = int(hit[0]), self.matched + 1
        if not (self.parent == self.node).any():  # a leaf: every draft on this path was accepted
            return self.matched, self.matched
        return None


def tree_parents(mask: np.ndarray) -> np.ndarray:
    """[n] parent of each node of one request's dense tree mask ([n, n], [i, j] = j is an ancestor of or is i);
    -1 for the root and for padding nodes (they see only themselves)."""
    depth = mask.sum(-1) - 1
    is_parent = mask & (depth[None, :] == depth[:, None] - 1)
    return np.where(depth > 0, is_parent.argmax(-1), -1)


class ShadowDrafts:
    """Per request, the unverified draft being judged (module docstring)."""

    def __init__(self) -> None:
        self.walks: dict[str, _Walk] = {}

    def step(
        self,
        rids: tuple[str, ...],
        verified: list[int],
        emitted: list[int] | None,
        tokens: np.ndarray | None,
        mask: np.ndarray | None,
        drafts: list[int],
    ) -> tuple[ShadowOutcome, ...]:
        """After a decode step: `verified[i]` drafts request i verified, `emitted[i]` the first token it emitted
        (None: nobody ran at K = 0), `tokens` [bs * n] / `mask` [bs, n, n] / `drafts` [bs] this step's trees."""
        out: list[ShadowOutcome] = []
        if emitted is not None:
            n = mask.shape[-1] if mask is not None else 0
            for i, rid in enumerate(rids):
                if verified[i] > 0:
                    self.walks.pop(rid, None)  # its own verify measures it
                    continue
                walk = self.walks.get(rid)
                if walk is None and drafts[i] > 0:
                    row = mask[i]
                    walk = _Walk(tokens[i * n : (i + 1) * n].copy(), tree_parents(row), drafts[i])
                    self.walks[rid] = walk
                if walk is None:
                    continue
                judged = walk.advance(emitted[i])
                if judged is not None:
                    del self.walks[rid]
                    out.append(ShadowOutcome(rid, walk.draft_depth, *judged))
        if len(self.walks) > 2 * len(rids) + 64:
            live = set(rids)
            self.walks = {rid: w for rid, w in self.walks.items() if rid in live}
        return tuple(out)
