"""Scratch (77th session), loaded in every process of a run (PYTHONPATH=bench/results/accept-head-s77/variants:.):
registers the variants of head_scratch.py."""

from service.policy import base

base._POLICIES["static-margin"] = "head_scratch:StaticMargin"
base._POLICIES["static-head"] = "head_scratch:StaticHead"
base._POLICIES["moe-serve-margin"] = "head_scratch:MarginOnly"
