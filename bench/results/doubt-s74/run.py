"""Scratch (74th session): bench.policies with the variants of sitecustomize.py beside this file (every engine process
must load it: PYTHONPATH=bench/results/doubt-s74:.); with STEP_LOG set, the drafter engines' step log there.
Usage: [STEP_LOG=F] PYTHONPATH=bench/results/doubt-s74:. python bench/results/doubt-s74/run.py [bench.policies args]"""

import dataclasses
import os
import sys

from bench import policies

if os.environ.get("STEP_LOG"):
    plain = policies.drafter_settings
    policies.drafter_settings = lambda *a, **k: dataclasses.replace(plain(*a, **k), step_log=os.environ["STEP_LOG"])

policies.HINTED = (
    *policies.HINTED,
    *(policies.Variant(n, {"policy": n}) for n in ("moe-serve-nodoubt", "moe-serve-doubt2")),
)
sys.exit(policies.main(sys.argv[1:]))
