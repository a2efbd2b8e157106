"""Ordinary / ridge least squares on plain Python lists (the policy layer carries no numpy).

Solves (XᵀX + λI) c = Xᵀy + λ c_prior by Gaussian elimination with partial pivoting. With λ = 0 this is ordinary
least squares; a small λ pulls directions the data cannot identify (e.g. a policy that always used the same K)
toward the prior instead of toward noise. `fit_nonnegative` keeps every coefficient >= 0 by refitting without the
columns that came out negative (clipping a solution afterwards would move every prediction: with collinear features
one coefficient goes negative to pay for another's excess).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from operator import mul


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve the square system a·x = b; raises ValueError when a is singular."""
    n = len(a)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        scale = max(abs(v) for row in m for v in row[:n]) or 1.0
        if abs(m[pivot][col]) <= 1e-12 * scale:
            raise ValueError("singular system: the features do not determine the coefficients")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def fit(
    rows: Sequence[Sequence[float]],
    targets: Sequence[float],
    ridge: float = 0.0,
    prior: Sequence[float] | None = None,
) -> list[float]:
    """Coefficients c minimising Σ (row·c - target)² + ridge·|c - prior|²."""
    if not rows or len(rows) != len(targets):
        raise ValueError(f"need matching non-empty rows and targets, got {len(rows)} and {len(targets)}")
    n = len(rows[0])
    if any(len(row) != n for row in rows):
        raise ValueError("all rows need the same number of features")
    prior = [0.0] * n if prior is None else list(prior)
    ata = [[0.0] * n for _ in range(n)]
    aty = [0.0] * n
    for row, y in zip(rows, targets, strict=True):
        for i in range(n):
            ri = row[i]
            aty[i] += ri * y
            for j in range(i, n):
                ata[i][j] += ri * row[j]
    for i in range(n):
        for j in range(i):
            ata[i][j] = ata[j][i]
        ata[i][i] += ridge
        aty[i] += ridge * prior[i]
    return solve(ata, aty)


def fit_scaled(
    samples: Iterable[tuple[Sequence[float], float]], prior: Sequence[float], ridge: float
) -> tuple[float, ...]:
    """Ridge fit toward `prior` in features scaled to unit RMS, so one ridge weight means the same for every
    coefficient whatever its unit; `samples` are (features, target) pairs."""
    gram, fy, count = _moments(samples, len(prior))
    return tuple(_fit_moments(gram, fy, count, list(range(len(prior))), prior, ridge))


def fit_nonnegative(
    samples: Iterable[tuple[Sequence[float], float]], prior: Sequence[float], ridge: float
) -> tuple[float, ...]:
    """`fit_scaled` under c >= 0: while the fit has negative coefficients, the most negative one is fixed at 0 and
    the rest refitted (an active-set search; a coefficient fixed once stays fixed, enough for the few features the
    policies fit). Every refit of the search is solved from the samples' moments (`_moments`, one pass): the cost
    model refits its 256 kept steps every 16 steps, inside the engine's step, and with a pass over them per refit of
    the search a refit took 0.87 ms, 0.23 from moments (fifty-ninth session, bench/results/refit-s59)."""
    n = len(prior)
    gram, fy, count = _moments(samples, n)
    free = list(range(n))
    while True:
        coef = _fit_moments(gram, fy, count, free, prior, ridge) if free else []
        worst = min(range(len(free)), key=lambda j: coef[j], default=None)
        if worst is None or coef[worst] >= 0.0:
            out = [0.0] * n
            for i, c in zip(free, coef, strict=True):
                out[i] = c
            return tuple(out)
        del free[worst]


def _moments(samples: Iterable[tuple[Sequence[float], float]], n: int) -> tuple[list[list[float]], list[float], int]:
    """(Σ f fᵀ as its upper triangle, Σ f y, the count) of (features, target) samples with n features each."""
    samples = list(samples)
    if not samples:
        raise ValueError("need at least one sample")
    if any(len(f) != n for f, _ in samples):
        raise ValueError(f"every sample needs {n} features")
    columns = list(zip(*(f for f, _ in samples), strict=True))  # per feature, its value in every sample
    targets = [y for _, y in samples]
    gram = [[sum(map(mul, columns[i], columns[j])) if j >= i else 0.0 for j in range(n)] for i in range(n)]
    return gram, [sum(map(mul, column, targets)) for column in columns], len(samples)


def _fit_moments(
    gram: list[list[float]], fy: list[float], count: int, free: list[int], prior: Sequence[float], ridge: float
) -> list[float]:
    """`fit_scaled` of the features in `free` from the moments (`gram` upper triangle = Σ f fᵀ, `fy` = Σ f y over
    `count` samples): the same normal equations, each feature scaled to unit RMS."""
    scale = [math.sqrt(gram[i][i] / count) or 1.0 for i in free]
    ata = [
        [gram[min(i, j)][max(i, j)] / (si * sj) for j, sj in zip(free, scale, strict=True)]
        for i, si in zip(free, scale, strict=True)
    ]
    aty = [fy[i] / s + ridge * prior[i] * s for i, s in zip(free, scale, strict=True)]
    for d in range(len(free)):
        ata[d][d] += ridge
    return [c / s for c, s in zip(solve(ata, aty), scale, strict=True)]
