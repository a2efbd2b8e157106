import math

import pytest
import torch

from service.models.routing_stats import (
    agreement,
    consecutive_reuse,
    domain_stats,
    fit_effective_experts,
    load_share,
    moesd_unique,
    summarize,
    token_entropy,
    top_half_shares,
    uniform_reuse_baseline,
    unique_experts,
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


def test_unique_experts_counts_the_union_of_a_run():
    topk = torch.tensor([[[0, 1], [1, 2], [3, 4], [3, 4]]])  # [W=1, S=4, k=2]
    assert unique_experts(topk, 8, 1) == pytest.approx(2.0)
    assert unique_experts(topk, 8, 2) == pytest.approx((3 + 2) / 2)  # {0,1,2} then {3,4}
    assert unique_experts(topk, 8, 4) == pytest.approx(5.0)


def test_moesd_formula_and_its_fit_on_uniform_routing():
    assert moesd_unique(64, 8, 1) == pytest.approx(8.0)
    assert moesd_unique(64, 8, 64) == pytest.approx(64 * (1 - (7 / 8) ** 64))
    generator = torch.Generator().manual_seed(0)
    topk = torch.stack([torch.randperm(32, generator=generator)[:4] for _ in range(64 * 64)]).reshape(64, 64, 4)
    measured = {t: unique_experts(topk, 32, t) for t in (1, 2, 4, 8, 16, 32, 64)}
    for t, n in measured.items():  # independent uniform routing is MoESD's assumption: the formula must hold
        assert n == pytest.approx(moesd_unique(32, 4, t), rel=0.03)
    assert fit_effective_experts(measured, 32, 4) == pytest.approx(32, rel=0.05)
    # routing that always reuses the same 8 experts looks like a model with 8 experts
    sticky = torch.stack([torch.randperm(8, generator=generator)[:4] for _ in range(64 * 64)]).reshape(64, 64, 4)
    assert fit_effective_experts({t: unique_experts(sticky, 32, t) for t in measured}, 32, 4) == pytest.approx(
        8, rel=0.05
    )


def test_top_half_shares_flat_and_concentrated():
    flat = torch.zeros(1, 16, 8)  # every expert equally likely
    topk = torch.arange(16).remainder(8).reshape(1, 16, 1)  # slots spread evenly over the 8 experts
    mass, slots = top_half_shares(flat, topk, 16)
    assert mass == pytest.approx(0.5) and slots == pytest.approx(0.5)
    peaked = torch.full((1, 16, 8), -20.0)
    peaked[..., 0] = 20.0
    mass, slots = top_half_shares(peaked, torch.zeros(1, 16, 1, dtype=torch.long), 16)
    assert mass == pytest.approx(1.0) and slots == pytest.approx(1.0)


def test_verify_view_in_domain_stats_and_summary():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 64, 16, generator=generator)
    layers = domain_stats([logits, logits.flip(-1)], top_k=4, draft_logits=None)
    assert sorted(layers[0]["top_half_mass"]) == [16, 32, 64] and len(layers[0]["unique"]) == 64
    assert layers[0]["unique"][1] == pytest.approx(4.0)
    summary = summarize({"python": layers}, 16, 4)["python"]
    assert summary["unique_moesd"][1] == pytest.approx(4.0)
    assert 0.5 <= summary["top_half_mass"][16] <= 1.0
    assert summary["unique_measured"][64] <= 16
