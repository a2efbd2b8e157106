"""Scratch (75th session), loaded in every process of a bench run (PYTHONPATH=bench/results/judge1-s75:.): registers
"moe-serve-j1", moe-serve whose requests have their first judgement after one emitted token (judge_after=1) instead
of the default (2 where judgements run beside the target's forward, else 4), so that one bench.policies run measures
it interleaved with moe-serve on the same engines (run.py adds the variant)."""

from service.policy import base

base._POLICIES["moe-serve-j1"] = "j1_scratch:JudgeAfterOne"
