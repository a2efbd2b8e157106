"""Sampled tree verification is lossless: emitted tokens follow the target distribution (chi-square, seeded)."""

import pytest
import torch

from service.kernels.rejection_sampling import tree_speculative_sampling_target_only
from service.kernels.spec_verify import verify_tree_greedy_cpu

# Tree: node 0 (root) -> children 1 (token A), 2 (token B); node 1 -> child 3 (token C).
A, B, C = 1, 3, 2
CANDIDATES = [7, A, B, C]  # node 0's token is the last verified one; never compared
NEXT_TOKEN = [1, 3, -1, -1]
NEXT_SIBLING = [-1, 2, -1, -1]
VOCAB = 5
CHI2_DF4_P001 = 18.47  # chi-square critical value, 4 degrees of freedom, p = 0.001


def _run(target: torch.Tensor, bs: int, seed: int, num_spec_step: int = 3):
    """target: [4, VOCAB] per-node distribution, shared by bs identical requests with independent coins."""
    n = len(CANDIDATES)
    g = torch.Generator().manual_seed(seed)
    predicts = torch.full((bs * n,), -1, dtype=torch.int32)
    accept_index = torch.full((bs, num_spec_step), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    tree_speculative_sampling_target_only(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_num,
        candidates=torch.tensor([CANDIDATES] * bs),
        retrive_index=torch.arange(bs * n).view(bs, n),
        retrive_next_token=torch.tensor([NEXT_TOKEN] * bs),
        retrive_next_sibling=torch.tensor([NEXT_SIBLING] * bs),
        uniform_samples=torch.rand(bs, n, generator=g),
        uniform_samples_for_final_sampling=torch.rand(bs, generator=g),
        target_probs=target.expand(bs, n, VOCAB).contiguous(),
        draft_probs=torch.zeros(bs, n, VOCAB),
    )
    # emitted tokens = accepted drafts, then the bonus the last accepted node predicts
    emitted = []
    for b in range(bs):
        path = [int(i) for i in accept_index[b] if i >= 0]
        emitted.append([int(predicts[slot]) for slot in path])
    return emitted, accept_num


def _chi2(tokens: list[int], probs: torch.Tensor) -> float:
    counts = torch.bincount(torch.tensor(tokens), minlength=VOCAB).double()
    expected = probs.double() * len(tokens)
    return float(((counts - expected) ** 2 / expected).sum())


TARGET = torch.tensor(
    [
        [0.10, 0.35, 0.15, 0.25, 0.15],  # root: A and B both likely, mass left for the residual
        [0.20, 0.10, 0.40, 0.20, 0.10],  # after A: C likely
        [0.30, 0.30, 0.10, 0.10, 0.20],  # after B
        [0.20, 0.20, 0.20, 0.20, 0.20],  # after A C
    ]
)


@pytest.mark.parametrize("seed", [0, 1])
def test_emitted_tokens_follow_the_target_distribution(seed):
    emitted, accept_num = _run(TARGET, bs=6000, seed=seed)
    assert {0, 1, 2} <= set(accept_num.tolist())  # rejections, partial and full acceptance all happened
    first = [seq[0] for seq in emitted]
    assert _chi2(first, TARGET[0]) < CHI2_DF4_P001
    after_a = [seq[1] for seq in emitted if seq[0] == A]
    after_b = [seq[1] for seq in emitted if seq[0] == B]
    assert _chi2(after_a, TARGET[1]) < CHI2_DF4_P001
    assert _chi2(after_b, TARGET[2]) < CHI2_DF4_P001
    # the same statistic rejects a distribution 0.05 away from the truth: the test has power at this sample size
    shifted = TARGET[0] + torch.tensor([0.05, -0.05, 0.0, 0.0, 0.0])
    assert _chi2(first, shifted) > CHI2_DF4_P001


def test_one_hot_target_reduces_to_greedy_verification():
    target = torch.nn.functional.one_hot(torch.tensor([A, C, 4, 0]), VOCAB).float()
    emitted, accept_num = _run(target, bs=8, seed=3)
    predicts = torch.full((4,), -1, dtype=torch.int32)
    accept_index = torch.full((1, 3), -1, dtype=torch.int32)
    greedy_num = torch.empty(1, dtype=torch.int32)
    verify_tree_greedy_cpu(
        predicts,
        accept_index,
        greedy_num,
        torch.tensor([CANDIDATES]),
        torch.arange(4).view(1, 4),
        torch.tensor([NEXT_TOKEN]),
        torch.tensor([NEXT_SIBLING]),
        torch.tensor([[A, C, 4, 0]]),
    )
    greedy = [int(predicts[int(i)]) for i in accept_index[0] if i >= 0]
    assert all(seq == greedy for seq in emitted) and greedy == [A, C, 0]
    assert accept_num.tolist() == [2] * 8


def test_rejected_children_are_excluded_from_the_residual():
    # whenever both A and B are rejected at the root, the residual draw must never emit them
    target = TARGET.clone()
    emitted, accept_num = _run(target, bs=400, seed=5)
    residual_draws = [seq[0] for seq, k in zip(emitted, accept_num.tolist(), strict=True) if k == 0]
    assert residual_draws and not ({A, B} & set(residual_draws))
