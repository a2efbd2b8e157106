import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.policy.cascade_search import best_trial, next_trial_k


@pytest.mark.parametrize(
    ("trials", "expected"),
    [
        ([(3, 1.2)], 4),  # useful: explore upward
        ([(3, 0.8)], 2),  # harmful: backtrack
        ([(1, 0.8)], None),  # exit (2): next K would be 0
        ([(3, 1.2), (4, 1.5)], 5),  # rising with K: keep climbing from the best
        ([(3, 1.5), (4, 1.2)], 2),  # fell: reverse, step from the best (3)
        ([(3, 1.0), (4, 1.05)], None),  # exit (3): neighbours within 10 %
        ([(4, 1.6), (3, 1.3), (5, 1.1)], None),  # exit (1): 1.6 > 1.3 > 1.1
        ([(3, 2.0), (4, 1.6), (2, 1.3)], None),  # exit (1): fell on successive trials
        ([(3, 0.9), (2, 0.95)], None),  # within 10 %: exit (3)
        ([(3, 0.6), (2, 0.8), (1, 0.9)], None),  # still rising toward K = 0: next K would be 0, exit (2)
        ([(4, 1.6), (3, 1.3), (5, 1.7)], 6),  # fell, reversed, rose past the old best: climb on
        ([(6, 1.2), (7, 1.5)], None),  # next K 8 above k_max 7
        ([(2, 1.2), (3, 1.5), (4, 2.0), (5, 2.5)], None),  # M = 4 trials used
    ],
)
def test_hill_climb_table(trials, expected):
    assert next_trial_k(trials, k_max=7) == expected


def test_best_trial_prefers_smaller_k_on_ties():
    assert best_trial([(3, 1.2), (2, 1.2), (4, 1.1)]) == (2, 1.2)


def test_needs_a_trial():
    with pytest.raises(ValueError):
        next_trial_k([], k_max=7)


@given(
    st.lists(st.tuples(st.integers(1, 7), st.floats(0.05, 4.0)), min_size=1, max_size=6, unique_by=lambda t: t[0]),
    st.integers(1, 7),
)
def test_next_k_is_new_and_within_bounds(trials, k_max):
    nxt = next_trial_k(trials, k_max=k_max, max_trials=8)
    if nxt is not None:
        assert 1 <= nxt <= k_max
        assert nxt not in {k for k, _ in trials}
