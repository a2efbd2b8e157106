"""Scratch (76th session), loaded in every process of a run (PYTHONPATH=bench/results/oracle-s76/variants:.):
registers the variants of stop_scratch.py."""

from service.policy import base

base._POLICIES["moe-serve-nostop"] = "stop_scratch:NoStop"
base._POLICIES["static-stop"] = "stop_scratch:StaticStop"
base._POLICIES["moe-serve-capk"] = "stop_scratch:CapK"
base._POLICIES["moe-serve-capk-rest4"] = "stop_scratch:CapKRest4"
