"""Scratch (72nd session): what `rejudging_could_pay` costs at batch 8, offline: eight judged requests at p ~0.2
(two rejected outcomes each) on a policy fitted as the tests' `cpu_like` (moe-fine x48's CPU step times), each
request's check timed (ms per check, best conditions: no engine beside it) and profiled.
usage: PYTHONPATH=. python bench/results/zen5-b8-s72/rejudge_cost.py"""

import cProfile
import pstats
import time

from service.policy.moe_serve_probe import rejudging_could_pay
from tests.policy.test_moe_serve import cpu_like, wave

policy = cpu_like(0.9)
for rid in [f"r{i}" for i in range(8)]:
    for _ in range(2):
        policy.accept.update(rid, 1, 0)
batch = wave(8, [4] * 8)
probs = [policy.accept.get(r.request_id) for r in batch.requests]
caps = [4] * 8


def run(rounds: int = 50) -> list[bool]:
    return [rejudging_could_pay(policy, i, probs, caps, batch) for _ in range(rounds) for i in range(8)]


start = time.perf_counter()
answers = run()
print(f"{(time.perf_counter() - start) / len(answers) * 1e3:.3f} ms per check, {sum(answers)} of {len(answers)} pay")
profile = cProfile.Profile()
profile.runcall(run, 20)
pstats.Stats(profile).sort_stats("tottime").print_stats(8)
