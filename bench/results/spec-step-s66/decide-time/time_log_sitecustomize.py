"""Scratch (66th session): where moe-serve's decide() time goes. For each decide() (and observe()) taking > 1 ms, the
time and calls of its parts (allocate, _rejudging_could_pay, _judgements_pay, _scout, _rests, _priced_for,
_objective, ...) as a JSON line in $TIME_LOG. Loaded as `sitecustomize` by every Python process (copy it to DIR as
sitecustomize.py; TIME_LOG=/tmp/t.jsonl PYTHONPATH=DIR:. python bench/results/prose-b1-s55/run_logged.py ...); it
patches service.policy.moe_serve when that is imported."""

import collections
import importlib.abc
import importlib.util
import json
import os
import sys
import time

OUT = os.environ.get("TIME_LOG")
_T = "service.policy.moe_serve"
_acc = collections.defaultdict(lambda: [0, 0.0])
PARTS = (
    "allocate",
    "_rejudging_could_pay",
    "_judgements_pay",
    "_scout",
    "_rests",
    "_priced_for",
    "_objective",
    "_probes_pay",
    "_batch_hope",
    "trim",
)


def _write(rec: dict) -> None:
    with open(OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = _acc[name]
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    return wrapper


def _logged(name, fn):
    def wrapper(self, batch, *args, **kwargs):
        _acc.clear()
        start = time.perf_counter()
        out = fn(self, batch, *args, **kwargs)
        took = time.perf_counter() - start
        if took > 1e-3:
            parts = {k: [v[0], round(v[1] * 1e3, 2)] for k, v in _acc.items()}
            _write(
                {"t": time.time(), "fn": name, "ms": round(took * 1e3, 2), "bs": len(batch.requests), "parts": parts}
            )
        return out

    return wrapper


def _patch(mod) -> None:
    policy = mod.MoeServePolicy
    for name in PARTS:
        setattr(policy, name, _timed(name, getattr(policy, name)))
    for name in ("decide", "observe"):
        setattr(policy, name, _logged(name, getattr(policy, name)))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _T:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
