"""Scratch (41st session): decide() / observe() time of moe-serve's policy in-process, on the tests' CPU-like policy
(tests/policy/test_moe_serve.py cpu_like) with NGRAM drafts of depth 4 at batch 1 and 8, median of 200 steps, then a
cProfile of 100 more. usage (repo root): python bench/results/pyspy-s41/decide_time.py"""

import cProfile
import pstats
import statistics
import sys
import time
from dataclasses import replace

sys.path[:0] = [".", "tests/policy"]
from test_moe_serve import cpu_like, drafted, stats  # noqa: E402

from service.policy.types import ShadowOutcome  # noqa: E402


def one_step(policy, view, n: int, step: int) -> tuple[float, float]:
    """One decide + observe at `step` (every request at K = 0 judged: one of 2 positions matched); seconds each."""
    v = replace(view, requests=tuple(replace(r, tokens_so_far=step, tokens_left=99) for r in view.requests))
    t0 = time.perf_counter()
    d = policy.decide(v)
    t1 = time.perf_counter()
    ks = [r.k for r in d.requests]
    shadow = tuple(ShadowOutcome(f"n{i}", 4, 2, 1) for i in range(n) if ks[i] == 0)
    policy.observe(replace(stats(ks, [0] * n, 0.06, prefix="n"), shadow=shadow))
    t2 = time.perf_counter()
    policy._rest_until.clear()  # every step weighs every request
    return t1 - t0, t2 - t1


for n in (1, 8):
    policy, view = cpu_like(0.5), drafted(n, depth=4, prefix="n")
    times = [one_step(policy, view, n, s) for s in range(200)]
    decide_ms = statistics.median(t[0] for t in times) * 1e3
    observe_ms = statistics.median(t[1] for t in times) * 1e3
    print(f"batch {n}: decide median {decide_ms:.3f} ms, observe median {observe_ms:.3f} ms")
    profile = cProfile.Profile()
    profile.enable()
    for s in range(200, 300):
        one_step(policy, view, n, s)
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(18)
