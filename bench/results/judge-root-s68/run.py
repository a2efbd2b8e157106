"""Scratch (68th session): bench.policies with the variants "moe-serve-j2", "moe-serve-nr" and "moe-serve-nb"
(sitecustomize.py beside this file, which every engine process must load: PYTHONPATH=bench/results/judge-root-s68:.);
with STEP_LOG set, the drafter engines' step log there (as ../prose-b1-s55/run_logged.py).
Usage: [STEP_LOG=F] PYTHONPATH=DIR:. python run.py [bench.policies args] (--policies ...,moe-serve-nb)"""

import dataclasses
import os
import sys

from bench import policies

if os.environ.get("STEP_LOG"):
    plain = policies.drafter_settings
    policies.drafter_settings = lambda *a, **k: dataclasses.replace(plain(*a, **k), step_log=os.environ["STEP_LOG"])

policies.HINTED = (
    *policies.HINTED,
    *(
        policies.Variant(n, {"policy": n})
        for n in (
            "moe-serve-j2",
            "moe-serve-nr",
            "moe-serve-nb",
            "moe-serve-pw",
            "moe-serve-nd",
            "moe-serve-jr",
            "scripted-judge",
            "scripted-plain",
            "moe-serve-log",
            "moe-serve-pr",
            "moe-serve-log8",
            "moe-serve-lp",
        )
    ),
)
sys.exit(policies.main(sys.argv[1:]))
