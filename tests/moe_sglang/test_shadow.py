"""Unverified drafts judged by the tokens emitted after them (moe_sglang/shadow.py): what a greedy verify of the
same draft would have accepted, reported once per draft."""

import numpy as np

from moe_sglang.shadow import ShadowDrafts, tree_parents
from service.policy import ShadowOutcome


def dense(parents: list[int]) -> np.ndarray:
    """[n, n] ancestor-or-self mask of a tree given by parent per node (-1: root; a node that is its own parent
    index -2: padding, sees only itself)."""
    n = len(parents)
    mask = np.eye(n, dtype=bool)
    for i, p in enumerate(parents):
        while p >= 0:
            mask[i, p] = True
            p = parents[p]
    return mask


CHAIN = dense([-1, 0, 1, 2])  # root, then drafts 1 -> 2 -> 3
TREE = dense([-1, 0, 0, 1, -2])  # root with two children (1, 2); 3 under 1; node 4 padding


def test_parents_of_a_dense_tree():
    assert tree_parents(CHAIN).tolist() == [-1, 0, 1, 2]
    assert tree_parents(TREE).tolist() == [-1, 0, 0, 1, -1]


def one(shadow, verified, emitted, tokens=None, mask=None, drafts=(0,)):
    masks = None if mask is None else mask[None]
    toks = None if tokens is None else np.asarray(tokens, dtype=np.int64)
    return shadow.step(("a",), list(verified), emitted, toks, masks, list(drafts))


def test_a_chain_is_followed_until_a_token_differs():
    shadow = ShadowDrafts()
    assert one(shadow, [0], [11], [10, 11, 12, 13], CHAIN, [3]) == ()  # draft 1 matched
    assert one(shadow, [0], [12], [10, 99, 99, 99], CHAIN, [3]) == ()  # draft 2 matched; the new lookup is not used
    assert one(shadow, [0], [7], drafts=[0]) == (ShadowOutcome("a", 3, 3, 2),)  # draft 3 rejected
    assert shadow.walks == {}


def test_a_chain_matched_to_its_leaf_is_all_accepted():
    shadow = ShadowDrafts()
    outs = [one(shadow, [0], [t], [10, 11, 12, 13], CHAIN, [3]) for t in (11, 12, 13)]
    assert outs == [(), (), (ShadowOutcome("a", 3, 3, 3),)]


def test_a_tree_follows_the_branch_the_tokens_take():
    shadow = ShadowDrafts()
    tokens = [10, 21, 22, 31, 0]
    assert one(shadow, [0], [21], tokens, TREE, [3]) == ()  # branch 1 (node 3 below it)
    assert one(shadow, [0], [31], drafts=[0]) == (ShadowOutcome("a", 3, 2, 2),)  # its leaf
    assert one(shadow, [0], [22], tokens, TREE, [3]) == (ShadowOutcome("a", 3, 1, 1),)  # branch 2 is a leaf
    assert one(shadow, [0], [5], tokens, TREE, [3]) == (ShadowOutcome("a", 3, 1, 0),)  # no child: rejected at once


def test_a_request_that_verifies_drops_its_walk_and_no_draft_starts_none():
    shadow = ShadowDrafts()
    assert one(shadow, [0], [11], [10, 11, 12, 13], CHAIN, [3]) == ()
    assert one(shadow, [2], [11], [10, 11, 12, 13], CHAIN, [3]) == () and shadow.walks == {}
    assert one(shadow, [0], [11], [10, 0, 0, 0], dense([-1, -2, -2, -2]), [0]) == () and shadow.walks == {}


def test_walks_of_requests_that_left_are_forgotten():
    shadow = ShadowDrafts()
    rids = tuple(f"r{i}" for i in range(80))
    tokens = np.tile(np.asarray([10, 11, 12, 13], dtype=np.int64), 80)
    shadow.step(rids, [0] * 80, [11] * 80, tokens, np.broadcast_to(CHAIN, (80, 4, 4)), [3] * 80)
    assert len(shadow.walks) == 80
    shadow.step(("r0",), [0], [12], None, None, [0])
    assert set(shadow.walks) == {"r0"}
