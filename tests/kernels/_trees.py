"""Random draft trees for the tree-op tests: EAGLE-style draft selections and plain parent arrays."""

import random


def random_parents(rng: random.Random, n: int) -> list[int]:
    """Node 0 is the root; every other node hangs under an earlier node."""
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def ancestors_with_self(parents: list[int], i: int) -> list[int]:
    chain = []
    while i >= 0:
        chain.append(i)
        i = parents[i]
    return chain


def children(parents: list[int], p: int) -> list[int]:
    return [c for c in range(len(parents)) if parents[c] == p]


def eagle_draft(rng: random.Random, topk: int, depth: int, n: int):
    """Simulate EAGLE's draft: (parent_list, selected_index, node parents) for one request.

    Candidates are numbered as SGLang lays out its score list: step 0 holds topk candidates under the root, step i >= 1
    holds topk*topk candidates, `topk` children for each of the topk candidates expanded at that step.
    """
    score, parent_of = {}, {}
    for c in range(topk):
        score[c], parent_of[c] = rng.uniform(0.05, 1.0), -1
    expanded = list(range(topk))
    parent_list = [-1, *expanded]
    for step in range(1, depth):
        base = topk + topk * topk * (step - 1)
        block = []
        for r, p in enumerate(expanded):
            for j in range(topk):
                c = base + r * topk + j
                score[c], parent_of[c] = score[p] * rng.uniform(0.05, 0.99), p
                block.append(c)
        expanded = sorted(block, key=lambda c: -score[c])[:topk]
        if step < depth - 1:
            parent_list.extend(expanded)
    selected = sorted(sorted(score, key=lambda c: -score[c])[: n - 1])
    node_of = {c: i + 1 for i, c in enumerate(selected)}
    parents = [-1] + [0 if parent_of[c] == -1 else node_of[parent_of[c]] for c in selected]
    return parent_list, selected, parents
