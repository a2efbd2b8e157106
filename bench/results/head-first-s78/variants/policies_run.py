"""Scratch (78th session): bench.policies with this folder's variants as rows of their own; with STEP_LOG set, the
drafter engines' step log there (as accept-head-s77/variants/policies_run.py).
usage: [STEP_LOG=F] PYTHONPATH=bench/results/head-first-s78/variants:bench/results/accept-head-s77/variants:. \
    python .../policies_run.py [bench.policies args]"""

import dataclasses
import os
import sys

from bench import policies

if os.environ.get("STEP_LOG"):
    plain = policies.drafter_settings
    policies.drafter_settings = lambda *a, **k: dataclasses.replace(plain(*a, **k), step_log=os.environ["STEP_LOG"])

policies.HINTED = (
    *policies.HINTED,
    policies.Variant("static-head", {"policy": "static-head"}),
    *(
        policies.Variant(name, {"policy": name})
        for name in ("moe-serve-nowait", "moe-serve-floor", "moe-serve-before", "moe-serve-cap")
    ),
)
sys.exit(policies.main(sys.argv[1:]))
