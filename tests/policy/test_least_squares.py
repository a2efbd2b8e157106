import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.policy.least_squares import fit, fit_nonnegative, fit_scaled, solve


def test_solve_small_system():
    assert solve([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0]) == pytest.approx([0.8, 1.4])


def test_singular_system_is_a_clear_error():
    with pytest.raises(ValueError, match="singular"):
        solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0])


@given(st.lists(st.floats(-5, 5), min_size=3, max_size=3))
def test_fit_recovers_exact_coefficients(coef):
    rng = random.Random(1)
    rows = [[1.0, rng.uniform(0, 10), rng.uniform(0, 100)] for _ in range(20)]
    y = [sum(c * x for c, x in zip(coef, r, strict=True)) for r in rows]
    assert fit(rows, y) == pytest.approx(coef, abs=1e-6)


def test_ridge_keeps_unidentified_directions_at_the_prior():
    rows = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]  # x2 = 2·x1: only c1 + 2·c2 is determined
    c = fit(rows, [5.0] * 3, ridge=1e-6, prior=[1.0, 2.0])
    assert c[0] + 2 * c[1] == pytest.approx(5.0, rel=1e-4)
    assert c == pytest.approx([1.0, 2.0], rel=1e-3)


def test_scaled_fit_handles_features_of_very_different_size():
    rng = random.Random(2)
    truth = (2e-3, 3e-5, 4e-8)
    samples = []
    for _ in range(50):
        f = [1.0, rng.uniform(1, 200), rng.uniform(1e3, 1e5)]
        samples.append((f, sum(c * x for c, x in zip(truth, f, strict=True))))
    assert fit_scaled(samples, prior=(0.0, 0.0, 0.0), ridge=1e-9) == pytest.approx(truth, rel=1e-4)


@pytest.mark.parametrize(("rows", "targets"), [([], []), ([[1.0]], [1.0, 2.0]), ([[1.0], [1.0, 2.0]], [1.0, 2.0])])
def test_bad_shapes_are_rejected(rows, targets):
    with pytest.raises(ValueError):
        fit(rows, targets)


def test_nonnegative_fit_refits_without_a_negative_coefficient_instead_of_clipping_it():
    """Collinear features where the free fit makes one coefficient negative to pay for another's excess (what the
    CPU engine's steps gave: tokens and experts grow together): clipping that coefficient to 0 afterwards would move
    every prediction; the non-negative fit refits without it and still predicts the data."""
    samples = [([1.0, t, e], 0.03 + 0.005 * e - 0.004 * t) for t in range(1, 9) for e in [2.0 * t + 0.3 * (t % 2)]]
    free = fit_scaled(samples, prior=(0.0, 0.0, 0.0), ridge=1e-9)
    assert min(free) < 0
    coef = fit_nonnegative(samples, prior=(0.0, 0.0, 0.0), ridge=1e-9)
    assert min(coef) >= 0.0
    for f, y in samples:
        assert sum(c * x for c, x in zip(coef, f, strict=True)) == pytest.approx(y, rel=0.1)
    clipped = [max(c, 0.0) for c in free]
    worst = max(abs(sum(c * x for c, x in zip(clipped, f, strict=True)) - y) / y for f, y in samples)
    assert worst > 0.1  # what clipping would have predicted


def test_nonnegative_fit_equals_the_free_fit_when_nothing_is_negative():
    rng = random.Random(3)
    samples = [([1.0, x, x * x], 1.0 + 2.0 * x + 0.5 * x * x) for x in (rng.uniform(0, 5) for _ in range(20))]
    assert fit_nonnegative(samples, (0.0, 0.0, 0.0), 1e-9) == pytest.approx(fit_scaled(samples, (0.0, 0.0, 0.0), 1e-9))


def _rowwise_scaled(samples, prior, ridge):
    """fit_scaled as a pass over the samples: each feature divided by its RMS, then `fit` on the scaled rows."""
    scale = [math.sqrt(sum(f[i] ** 2 for f, _ in samples) / len(samples)) or 1.0 for i in range(len(prior))]
    rows = [[x / s for x, s in zip(f, scale, strict=True)] for f, _ in samples]
    coef = fit(rows, [y for _, y in samples], ridge, [c * s for c, s in zip(prior, scale, strict=True)])
    return [c / s for c, s in zip(coef, scale, strict=True)]


def test_scaled_fit_from_moments_equals_the_rowwise_one():
    rng = random.Random(4)
    samples = [([1.0, rng.uniform(1, 200), rng.uniform(1e3, 1e5)], rng.uniform(0, 1)) for _ in range(30)]
    for ridge in (1e-9, 1e-3, 1.0):
        assert fit_scaled(samples, (0.1, 0.0, 1e-6), ridge) == pytest.approx(
            _rowwise_scaled(samples, (0.1, 0.0, 1e-6), ridge), rel=1e-9, abs=1e-12
        )


def _rowwise_nonnegative(samples, prior, ridge):
    """The active-set search with every refit a pass over the samples (`_rowwise_scaled`): what fit_nonnegative's
    moments must reproduce."""
    free = list(range(len(prior)))
    while True:
        sub = [([f[i] for i in free], y) for f, y in samples]
        coef = _rowwise_scaled(sub, [prior[i] for i in free], ridge) if free else ()
        worst = min(range(len(free)), key=lambda j: coef[j], default=None)
        if worst is None or coef[worst] >= 0.0:
            out = [0.0] * len(prior)
            for i, c in zip(free, coef, strict=True):
                out[i] = c
            return out
        del free[worst]


@given(
    st.lists(st.floats(-3, 3), min_size=4, max_size=4),
    st.integers(1, 60),
    st.integers(0, 10_000),
    st.sampled_from([1e-9, 1e-3, 1.0]),
)
def test_nonnegative_fit_from_moments_equals_the_rowwise_search(coef, count, seed, ridge):
    """Fits like the cost model's (a constant, batch size, tokens and experts that grow together, noise), with
    coefficients of either sign, so that the search drops 0-4 columns: the same coefficients as refitting over the
    rows each time."""
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        tokens = rng.randint(1, 40)
        f = [1.0, float(rng.choice((0, 1, 8))), float(tokens), 3.0 * tokens + rng.uniform(0, 20)]
        samples.append((f, sum(c * x for c, x in zip(coef, f, strict=True)) + rng.gauss(0, 0.1)))
    prior = (0.5, 0.0, 0.01, 0.002)
    try:
        expected = _rowwise_nonnegative(samples, prior, ridge)
    except ValueError:  # singular either way (e.g. one sample, ridge ~0)
        with pytest.raises(ValueError):
            fit_nonnegative(samples, prior, ridge)
        return
    got = fit_nonnegative(iter(samples), prior, ridge)  # any iterable, read once
    assert min(got) >= 0.0
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_nonnegative_fit_rejects_no_samples_and_ragged_ones():
    with pytest.raises(ValueError, match="at least one"):
        fit_nonnegative([], (0.0,), 1e-3)
    with pytest.raises(ValueError, match="2 features"):
        fit_nonnegative([([1.0, 2.0], 1.0), ([1.0], 1.0)], (0.0, 0.0), 1e-3)
