"""Cascade's hill-climbing search over K inside one test phase (Cascade §5.6), as a pure function.

After each trial (K_i, U_i):
  first trial:  next K = K + 1 if U >= 1 else K - 1
  later trials: direction d = sign(K_cur - K_prev), reversed if U_cur < U_prev;  next K = K_best + d
  early exits (no further trial):
    (1) utility fell on successive trials:         U_cur < U_prev < U_prev2
    (2) K reaches 0:                               next K <= 0
    (3) neighbouring K agree within `converge`:    |U_cur - U_prev| <= converge · max(U_cur, U_prev)
  also stop after `max_trials` trials, or when next K is above k_max or already tried in this phase.
"""

from __future__ import annotations


def next_trial_k(trials: list[tuple[int, float]], k_max: int, max_trials: int = 4, converge: float = 0.1) -> int | None:
    """K for the next trial given this phase's (K, utility) trials, or None to end the test phase."""
    if not trials:
        raise ValueError("next_trial_k needs at least one finished trial")
    k_cur, u_cur = trials[-1]
    if len(trials) >= max_trials:
        return None
    if len(trials) == 1:
        nxt = k_cur + 1 if u_cur >= 1.0 else k_cur - 1
    else:
        k_prev, u_prev = trials[-2]
        if abs(u_cur - u_prev) <= converge * max(u_cur, u_prev):
            return None  # exit (3): near the optimum
        if len(trials) >= 3 and u_cur < u_prev < trials[-3][1]:
            return None  # exit (1): past a local maximum
        direction = 1 if k_cur > k_prev else -1
        if u_cur < u_prev:
            direction = -direction
        nxt = best_trial(trials)[0] + direction
    if nxt <= 0:
        return None  # exit (2): speculation no longer pays
    if nxt > k_max or any(k == nxt for k, _ in trials):
        return None
    return nxt


def best_trial(trials: list[tuple[int, float]]) -> tuple[int, float]:
    """The (K, utility) with the highest utility; ties go to the smaller K (cheaper to verify)."""
    return max(trials, key=lambda t: (t[1], -t[0]))
