"""bench.budget's sweep of budgets: E / 2 (the goal's point), E - 1 and top_k always, about SWEEP_POINTS in all,
every budget where there are fewer."""

from bench.budget import SWEEP_POINTS, budget_sweep


def test_moe_fine_sweeps_every_other_budget_with_the_goals_point():
    assert budget_sweep(32, 4) == [31, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4]


def test_a_small_model_sweeps_every_budget():
    assert budget_sweep(8, 2) == [7, 6, 5, 4, 3, 2]
    assert budget_sweep(3, 2) == [2]


def test_e_half_e_minus_one_and_top_k_are_always_in_and_the_sweep_stays_small():
    for experts, top_k in ((64, 8), (60, 4), (128, 8), (33, 5), (16, 1)):
        budgets = budget_sweep(experts, top_k)
        assert {experts - 1, experts // 2, top_k} <= set(budgets)
        assert budgets == sorted(set(budgets), reverse=True)
        assert all(top_k <= b < experts for b in budgets)
        assert len(budgets) <= SWEEP_POINTS + 4
