"""Scratch (65th session): ../prose-b1-s55/run_logged.py with the drafter engines' draft thread off (the draft model's
catch-up and judgements on the scheduler's thread, draft_thread.py), to see whether work beside the target's forwards
slows them. Usage: PYTHONPATH=. python run_logged_thread_off.py STEP_LOG.jsonl [bench.policies args]"""

import dataclasses
import sys

from bench import policies

log = sys.argv[1]
plain = policies.drafter_settings
policies.drafter_settings = lambda *a, **k: dataclasses.replace(plain(*a, **k), step_log=log, draft_thread="off")
sys.exit(policies.main(sys.argv[2:]))
