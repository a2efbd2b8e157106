import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.policy.budget import budget_for_mass, depth_weights, expert_scores, kept_experts, layer_budgets


def test_scores_sum_router_probabilities_over_tokens():
    probs = [[0.5, 0.3, 0.2, 0.0], [0.1, 0.6, 0.0, 0.3]]
    assert expert_scores(probs) == pytest.approx([0.6, 0.9, 0.2, 0.3])
    assert expert_scores(probs, weights=[1.0, 0.5]) == pytest.approx([0.55, 0.6, 0.2, 0.15])


def test_depth_weights_decay_with_draft_depth():
    assert depth_weights([0, 1, 2], [1.0, 0.8, 0.5]) == pytest.approx([1.0, 0.56, 0.245])


@pytest.mark.parametrize(
    ("scores", "target", "minimum", "expected"),
    [
        ([4, 3, 2, 1], 0.4, 1, 1),  # 4/10 exactly
        ([4, 3, 2, 1], 0.41, 1, 2),
        ([4, 3, 2, 1], 0.9, 1, 3),
        ([4, 3, 2, 1], 1.0, 1, 4),
        ([4, 3, 2, 1], 0.1, 2, 2),  # never below the minimum (e.g. top-k)
        ([0, 0, 0], 0.5, 1, 1),  # no mass at all
    ],
)
def test_budget_for_mass_table(scores, target, minimum, expected):
    assert budget_for_mass(scores, target, minimum) == expected


@given(st.lists(st.floats(0, 10), min_size=1, max_size=64), st.floats(0.01, 1.0))
def test_budget_is_the_smallest_that_keeps_the_target_mass(scores, target):
    b = budget_for_mass(scores, target)
    ranked = sorted(scores, reverse=True)
    total = sum(scores)
    if total > 0:
        assert sum(ranked[:b]) >= target * total * (1 - 1e-9)
        assert b == 1 or sum(ranked[: b - 1]) < target * total * (1 - 1e-12)


def test_kept_experts_are_the_top_b_with_ties_to_lower_ids():
    assert kept_experts([0.1, 0.5, 0.5, 0.2], 2) == [1, 2]
    assert kept_experts([0.3, 0.3, 0.3], 2) == [0, 1]


def test_layer_budgets_fixed_or_by_mass():
    layers = [[[0.7, 0.2, 0.1]], [[0.34, 0.33, 0.33]]]
    assert layer_budgets(layers, fixed=2) == (2, 2)
    assert layer_budgets(layers, target=0.6) == (1, 2)
    with pytest.raises(ValueError):
        layer_budgets(layers)
    with pytest.raises(ValueError):
        layer_budgets(layers, fixed=2, target=0.5)


@pytest.mark.parametrize("bad", [0.0, 1.5])
def test_bad_target_is_rejected(bad):
    with pytest.raises(ValueError, match="mass target"):
        budget_for_mass([1.0], bad)
