"""Scratch (65th session): bench.replay with the drafter engines' step log on (moe_sglang/step_log.py) and each
replay's window (perf_counter, the step log's clock) written beside it, to see what a policy decided per step.
Usage: PYTHONPATH=. python run_logged.py STEP_LOG.jsonl WINDOWS.jsonl [bench.replay args]"""

import dataclasses
import json
import sys
import time

from bench import replay
from moe_sglang.settings import EngineSettings

log, windows = sys.argv[1], sys.argv[2]
plain_engine, plain_replay = replay.bench_engine, replay.replay_once


def logged_engine(model, spec, threads, settings=None, extra=()):
    settings = dataclasses.replace(settings or EngineSettings(), step_log=log)
    return plain_engine(model, spec, threads, settings, extra)


def timed_replay(url, s, prompts, hints):
    start = time.perf_counter()
    result = plain_replay(url, s, prompts, hints)
    with open(windows, "a") as f:
        f.write(json.dumps({"url": url, "hints": hints, "start": start, "end": time.perf_counter()}) + "\n")
    return result


replay.bench_engine, replay.replay_once = logged_engine, timed_replay
sys.exit(replay.main(sys.argv[3:]))
