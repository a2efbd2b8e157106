"""Scratch (73rd session): prices and allocations of a few fitted cost-model states, as repr strings in a JSON list,
to compare the code before and after the StepPricer byte for byte.
usage: PYTHONPATH=. python bench/results/pricer-s73/dump.py OUT.json (then cmp two outputs)"""

import json
import random
import sys
from dataclasses import replace

from service.policy.moe_serve_probe import rejudging_could_pay
from tests.policy.test_moe_serve import cpu_like, stats, wave

out = []
rng = random.Random(7)
for prior in (0.05, 0.3, 0.9):
    policy = cpu_like(prior)
    # batch-8 steps so bucket 4 gets routing and calibration
    for _ in range(40):
        k = rng.choice([0, 1, 2, 3])
        acc = [rng.randint(0, k) for _ in range(8)]
        s = replace(
            stats([k] * 8, acc, 0.02 + 0.004 * k + rng.random() * 0.005, unique=(10 + 2 * k,) * 4), draft_s=0.003 * k
        )
        if k == 0:
            s = replace(s, plain=True, draft_steps=0)
        policy.observe(s)
    if prior != 0.3:
        policy.model.refit()
    m = policy.model
    for variant in (m, m.hoped(), m.reusing(0.3), m.owning(1.2), m.scouting()):
        for n in (1, 2, 4, 8):
            for tokens in range(n, n * 5 + 1, max(n // 2, 1)):
                for acc in (None, 0.0, (tokens - n) / 2):
                    for budget in (None, 16):
                        out.append(variant.verify_time(tokens, n, budget, acc))
                        out.append(variant.experts(tokens, n, budget, acc))
                        for ds in (0, 1, 3):
                            out.append(variant.step_time(tokens, n, ds, tokens - n, budget, 5.0, acc))
    for r in [f"r{i}" for i in range(8)]:
        for _ in range(2):
            policy.accept.update(r, 1, rng.randint(0, 1))
    batch = wave(8, [4] * 8)
    probs = [policy.accept.get(r.request_id) for r in batch.requests]
    out.append([rejudging_could_pay(policy, i, probs, [4] * 8, batch) for i in range(8)])
    out.append(policy.allocate([[0.9, 0.8, 0.7, 0.6]] * 8, [4] * 8, 1.0, True, layout=batch))
    out.append(policy.allocate([[0.5, 0.4, 0.3, 0.2]] * 4 + [[0.95] * 4] * 4, [4] * 8, 1.0, True, layout=batch))
    out.append(policy.allocate([[0.9, 0.8, 0.7, 0.6]] * 8, [4] * 8, 1.0, False, layout=batch))
with open(sys.argv[1], "w") as f:
    json.dump([repr(x) for x in out], f)
print(len(out))
