"""Scratch (55th session): bench.policies with the drafter engines' step log on (moe_sglang/step_log.py), to see
what moe-serve decided per step. Usage: PYTHONPATH=. python run_logged.py STEP_LOG.jsonl [bench.policies args]"""

import dataclasses
import sys

from bench import policies

log = sys.argv[1]
plain = policies.drafter_settings
policies.drafter_settings = lambda *a, **k: dataclasses.replace(plain(*a, **k), step_log=log)
sys.exit(policies.main(sys.argv[2:]))
