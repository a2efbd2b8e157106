"""Scratch (77th session): bench.policies with the variants of head_scratch.py as rows of their own (every engine
process loads sitecustomize.py: PYTHONPATH=bench/results/accept-head-s77/variants:.); with STEP_LOG set, the drafter
engines' step log there.
usage: [STEP_LOG=F] PYTHONPATH=bench/results/accept-head-s77/variants:. python .../policies_run.py [bench.policies args]"""

import dataclasses
import os
import sys

from bench import policies

if os.environ.get("STEP_LOG"):
    plain = policies.drafter_settings
    policies.drafter_settings = lambda *a, **k: dataclasses.replace(plain(*a, **k), step_log=os.environ["STEP_LOG"])

policies.HINTED = (
    *policies.HINTED,
    policies.Variant("moe-serve-margin", {"policy": "moe-serve-margin"}),
    policies.Variant("static-head", {"policy": "static-head"}),
    policies.Variant("static-margin", {"policy": "static-margin"}),
)
sys.exit(policies.main(sys.argv[1:]))
