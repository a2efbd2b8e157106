"""Scratch (fifty-ninth session): what one refit of moe-serve's cost model costs, before and after its fits were
solved from moments (least_squares.fit_nonnegative), in one run, interleaved. The policy is the tests' CPU-like one
(tests/policy/test_moe_serve.py cpu_like) after 400 steps at batch 1 (its windows full: 256 kept steps); "before"
swaps in the row-wise active-set search and the per-row prior scale the code had until this session.
usage (repo root): PYTHONPATH=. python bench/results/refit-s59/refit_time.py OUT.json"""

import dataclasses
import json
import statistics
import sys
import time
from dataclasses import replace

sys.path[:0] = [".", "tests/policy"]
from test_least_squares import _rowwise_nonnegative  # noqa: E402
from test_moe_serve import cpu_like, drafted, stats  # noqa: E402

from service.policy import cost_model  # noqa: E402
from service.policy.least_squares import fit_nonnegative  # noqa: E402


def old_prior_scale(self) -> float:
    p = self._prior
    weights = (p.verify_fixed, p.verify_extra, p.per_token, p.per_expert)
    predicted = sum(sum(w * x for w, x in zip(weights, row, strict=True)) for row, _ in self._verify_rows)
    measured = sum(y for _, y in self._verify_rows)
    return measured / predicted if predicted > 0 and measured > 0 else 1.0


policy, view = cpu_like(0.5), drafted(1, depth=4, prefix="n")
for s in range(400):
    v = replace(view, requests=tuple(replace(r, tokens_so_far=s, tokens_left=99) for r in view.requests))
    ks = [r.k for r in policy.decide(v).requests]
    policy.observe(stats(ks, [0], 0.006, prefix="n"))
    policy._rest_until.clear()
model = policy.model
variants = {
    "after": (fit_nonnegative, cost_model.StepTimeModel._prior_scale),
    "before": (lambda s, p, r: tuple(_rowwise_nonnegative(list(s), p, r)), old_prior_scale),
}
times = {name: [] for name in variants}
coefs = {}
for _round in range(20):
    for name, (fit, scale) in variants.items():
        cost_model.fit_nonnegative, cost_model.StepTimeModel._prior_scale = fit, scale
        for _ in range(10):
            t = time.perf_counter()
            model.refit()
            times[name].append(time.perf_counter() - t)
        coefs[name] = [v for v in dataclasses.astuple(model.coef) if v is not None]
out = {
    "rows": {"verify": len(model._verify_rows), "draft": len(model._draft_rows), "judge": len(model._judge_rows)},
    "refit_ms": {
        n: {"median": statistics.median(t) * 1e3, "min": min(t) * 1e3, "max": max(t) * 1e3} for n, t in times.items()
    },
    "speedup_median": statistics.median(times["before"]) / statistics.median(times["after"]),
    "same_coefficients": all(
        abs(a - b) <= 1e-9 + 1e-6 * abs(b) for a, b in zip(coefs["after"], coefs["before"], strict=True)
    ),
}
print(json.dumps(out, indent=1))
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
