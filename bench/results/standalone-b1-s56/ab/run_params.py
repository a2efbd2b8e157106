"""Scratch (56th session): bench.policies with moe-serve's constructor params set on the drafter engines
(EngineSettings.policy_params_json). Usage: PYTHONPATH=. python run_params.py PARAMS_JSON [bench.policies args]"""

import dataclasses
import json
import sys

from bench import policies

params = sys.argv[1]
plain = policies.drafter_settings


def settings(*a, **k):
    base = plain(*a, **k)
    merged = {**json.loads(base.policy_params_json or "{}"), **json.loads(params)}
    return dataclasses.replace(base, policy_params_json=json.dumps(merged))


policies.drafter_settings = settings
sys.exit(policies.main(sys.argv[2:]))
