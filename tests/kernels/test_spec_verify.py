"""Greedy tree verification vs the longest agreeing path; bonus-token and input-rotation ops vs loops."""

import random

import pytest
import torch

from service.kernels.draft_inputs import rotate_input_ids_cpu
from service.kernels.spec_tree import tree_links
from service.kernels.spec_verify import fill_bonus_tokens_cpu, verify_tree_greedy_cpu
from tests.kernels._trees import ancestors_with_self, children, random_parents


def _random_verify_case(rng: random.Random, bs: int, n: int, vocab: int = 50):
    parents = [random_parents(rng, n) for _ in range(bs)]
    candidates, target = [], []
    for p in parents:
        tokens = [rng.randrange(vocab) for _ in range(n)]
        for node in range(n):  # siblings carry distinct tokens, as EAGLE top-k and NGRAM tries do
            kids = children(p, node)
            for kid, tok in zip(kids, rng.sample(range(vocab), len(kids)), strict=True):
                tokens[kid] = tok
        # the target agrees with one child most of the time, so long paths get accepted
        tgt = [
            tokens[rng.choice(children(p, i))] if children(p, i) and rng.random() < 0.75 else rng.randrange(vocab)
            for i in range(n)
        ]
        candidates.append(tokens)
        target.append(tgt)
    return parents, candidates, target


def _expected_path(parents, tokens, target, max_accept):
    """Deepest node whose whole root path agrees with the target (unique: siblings differ), capped at max_accept."""
    best = [0]
    for node in range(len(parents)):
        chain = ancestors_with_self(parents, node)[::-1]  # root .. node
        agrees = all(tokens[c] == target[parents[c]] for c in chain[1:])
        if agrees and len(chain) - 1 <= max_accept and len(chain) > len(best):
            best = chain
    return best


@pytest.mark.parametrize(
    ("seed", "bs", "n", "num_spec_step"), [(0, 1, 1, 1), (1, 2, 4, 4), (2, 4, 8, 4), (3, 3, 12, 6), (4, 5, 6, 2)]
)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_verify_tree_greedy_accepts_the_agreeing_path(seed, bs, n, num_spec_step, index_dtype):
    rng = random.Random(seed)
    parents, candidates, target = _random_verify_case(rng, bs, n)
    next_token, next_sibling = tree_links(torch.tensor(parents))
    retrive_index = torch.arange(bs * n).view(bs, n)
    predicts = torch.full((bs * n,), -5, dtype=torch.int32)
    accept_index = torch.full((bs, num_spec_step), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    verify_tree_greedy_cpu(
        predicts,
        accept_index,
        accept_num,
        torch.tensor(candidates, dtype=index_dtype),
        retrive_index.to(index_dtype),
        next_token.to(index_dtype),
        next_sibling.to(index_dtype),
        torch.tensor(target, dtype=index_dtype),
    )
    expected_predicts = [-5] * (bs * n)
    for b in range(bs):
        path = _expected_path(parents[b], candidates[b], target[b], num_spec_step - 1)
        assert accept_num[b] == len(path) - 1
        assert accept_index[b].tolist() == [b * n + i for i in path] + [-1] * (num_spec_step - len(path))
        for node in path:
            expected_predicts[b * n + node] = target[b][node]
    assert predicts.tolist() == expected_predicts


def test_verify_tree_greedy_rejects_wrong_output_dtype():
    with pytest.raises(ValueError, match="predicts"):
        verify_tree_greedy_cpu(
            torch.zeros(2, dtype=torch.int64),
            torch.zeros(1, 2, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32),
            *torch.zeros(5, 1, 2, dtype=torch.int64),
        )


@pytest.mark.parametrize("seed", range(3))
def test_fill_bonus_tokens_takes_last_accepted(seed):
    g = torch.Generator().manual_seed(seed)
    bs, stride = 6, 4
    tokens = torch.randint(0, 100, (bs, stride), generator=g, dtype=torch.int32)
    lens = torch.randint(1, stride + 1, (bs,), generator=g, dtype=torch.int32)
    bonus = torch.empty(bs, dtype=torch.int32)
    fill_bonus_tokens_cpu(tokens, lens, bonus, stride)
    assert bonus.tolist() == [int(tokens[b, int(lens[b]) - 1]) for b in range(bs)]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("with_select", [False, True])
def test_rotate_input_ids_matches_loop(seed, with_select):
    rng = random.Random(seed)
    lens = [rng.randrange(0, 5) for _ in range(4)]
    starts = [sum(lens[:i]) for i in range(len(lens))]
    ids = [rng.randrange(1000) for _ in range(sum(lens))]
    new = [rng.randrange(1000) for _ in lens]
    select = [s + rng.randrange(max(n, 1)) for s, n in zip(starts, lens, strict=True)]
    expected = list(ids)
    for s, n, tok, sel in zip(starts, lens, new, select, strict=True):
        for j in range(s, s + n - 1):
            expected[j] = ids[j + 1]
        if n > 0:
            expected[sel if with_select else s + n - 1] = tok
    tensor = torch.tensor(ids, dtype=torch.int64)
    rotate_input_ids_cpu(
        tensor,
        torch.tensor(starts),
        torch.tensor(lens),
        torch.tensor(new),
        torch.tensor(select) if with_select else None,
    )
    assert tensor.tolist() == expected
