"""Scratch (33rd session): what moe-serve's decide() and observe() cost per step, offline, on a stream of batch-1 NGRAM-like
requests (draft in hand at depth 4, 30 % of judged drafts accepted) -> policy_cost.json"""

import json
import random
import sys
import time

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from dataclasses import replace

from service.policy.moe_serve import MoeServePolicy
from service.policy.types import ShadowOutcome
from tests.policy.helpers import batch, stats

random.seed(0)
pol = MoeServePolicy(num_experts=32, top_k=4, num_layers=4)


def run(n_req=20, steps=30):
    td = to = 0.0
    for j in range(n_req):
        for t in range(steps):
            v = batch(1, max_k=4, prefix=f"q{j}-")
            v = replace(
                v,
                requests=tuple(replace(r, draft_depth=4, tokens_so_far=t + 1, tokens_left=32 - t) for r in v.requests),
            )
            a = time.perf_counter()
            d = pol.decide(v)
            b = time.perf_counter()
            k = d.requests[0].k
            acc = random.random() < 0.3
            st = stats([k], [min(k, 1 if acc else 0)], 0.015 + 0.008 * k, prefix=f"q{j}-", unique=(4 + 3 * k,) * 4)
            sh = (ShadowOutcome(f"q{j}-0", 4, 1 if not acc else 2, 1 if acc else 0),) if k == 0 else ()
            st = replace(st, shadow=sh, plain=k == 0)
            c = time.perf_counter()
            pol.observe(st)
            e = time.perf_counter()
            td += b - a
            to += e - c
    return td, to


run(5)
td, to = run(20)
result = {"decide_ms_per_step": td / 600 * 1e3, "observe_ms_per_step": to / 600 * 1e3}
print(result)
__import__("pathlib").Path(__file__).with_name("policy_cost.json").write_text(json.dumps(result, indent=1))
