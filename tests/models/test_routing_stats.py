import math

import pytest
import torch

from service.models.routing_stats import (
    agreement,
    consecutive_reuse,
    domain_stats,
    load_share,
    token_entropy,
    uniform_reuse_baseline,
)


def test_load_share_counts_assignments():
    topk = torch.tensor([[0, 1], [0, 2], [0, 1]])
    assert load_share(topk, 4).tolist() == pytest.approx([0.5, 1 / 3, 1 / 6, 0.0])


@pytest.mark.parametrize(
    "sequence,expected_any,expected_overlap",
    [
        ([[0, 1], [0, 1], [0, 1]], 1.0, 1.0),  # same pair every token
        ([[0, 1], [2, 3], [0, 1]], 0.0, 0.0),  # disjoint every step
        ([[0, 1], [1, 2], [3, 4]], 0.5, 0.25),  # one shared expert, then none
    ],
)
def test_consecutive_reuse_table(sequence, expected_any, expected_overlap):
    reuse_any, reuse_overlap = consecutive_reuse(torch.tensor([sequence]))
    assert reuse_any == pytest.approx(expected_any)
    assert reuse_overlap == pytest.approx(expected_overlap)


def test_uniform_baseline_matches_random_routing():
    assert uniform_reuse_baseline(8, 2) == pytest.approx(1 - 15 / 28)
    generator = torch.Generator().manual_seed(0)
    topk = torch.stack([torch.randperm(8, generator=generator)[:2] for _ in range(4000)]).unsqueeze(0)
    assert consecutive_reuse(topk)[0] == pytest.approx(uniform_reuse_baseline(8, 2), abs=0.03)


def test_entropy_bounds():
    assert token_entropy(torch.zeros(5, 8)) == pytest.approx(math.log(8))
    assert token_entropy(torch.tensor([[100.0, 0, 0, 0]])) == pytest.approx(0.0, abs=1e-6)


def test_agreement_is_order_insensitive():
    target = torch.tensor([[0, 1], [2, 3], [4, 5]])
    draft = torch.tensor([[1, 0], [2, 6], [6, 7]])
    exact, mean_overlap = agreement(target, draft)
    assert exact == pytest.approx(1 / 3)
    assert mean_overlap == pytest.approx(0.5)


def test_domain_stats_on_a_known_routing():
    logits = torch.full((1, 4, 4), -5.0)
    logits[0, :, 0] = 5.0
    logits[0, :, 1] = 4.0  # every token routes to experts {0, 1}
    layer = domain_stats([logits], top_k=2, draft_logits=[logits.clone()])[0]
    assert layer["load"] == [0.5, 0.5, 0.0, 0.0]
    assert layer["imbalance"] == 2.0 and layer["reuse_any"] == 1.0
    assert layer["int4_topk_exact"] == 1.0
