"""Scratch (fifty-sixth session): per batch-1 request of a step log (moe_sglang/step_log.py), its steps, the K and
accepted drafts of each ('.' a plain forward), time per token and judging time.
usage: python steps_summary.py STEPS.jsonl > steps_summary.txt"""

import collections
import json
import sys

with open(sys.argv[1]) as f:
    steps = [json.loads(line) for line in f]
by_request: dict[str, list[dict]] = collections.OrderedDict()
for step in steps:
    if len(step["rids"]) == 1:
        by_request.setdefault(step["rids"][0], []).append(step)
plain = sorted(s["end"] - s["start"] for run in by_request.values() for s in run if s["plain"])
print("plain step median ms", round(1e3 * plain[len(plain) // 2], 2) if plain else None, len(plain))
for rid, run in by_request.items():
    tokens = sum(1 + (s["accepted"][0] if s["accepted"] else 0) for s in run)
    span = run[-1]["end"] - run[0]["start"]
    marks = "".join("." if s["plain"] else f"{s['k'][0]}{s['accepted'][0] if s['accepted'] else '-'} " for s in run)
    judge = sum(s["judge_ms"] for s in run)
    print(rid[:6], "steps", len(run), "tokens", tokens, "ms/token", round(1e3 * span / tokens, 2), end=" ")
    print("judge_ms", round(judge, 1))
    print("   ", marks)
