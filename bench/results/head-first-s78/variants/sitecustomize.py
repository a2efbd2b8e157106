"""Scratch (78th session), loaded in every process of a run (PYTHONPATH=bench/results/head-first-s78/variants:
bench/results/accept-head-s77/variants:.): registers head_first.py's variants beside the 77th session's static-head
(accept-head-s77/variants/head_scratch.py)."""

from service.policy import base

base._POLICIES["static-head"] = "head_scratch:StaticHead"
base._POLICIES["moe-serve-nowait"] = "head_first:NoWait"
base._POLICIES["moe-serve-floor"] = "head_first:Floor"
base._POLICIES["moe-serve-before"] = "head_first:Before"
base._POLICIES["moe-serve-cap"] = "head_first:CapUp"
