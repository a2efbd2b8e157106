"""Scratch (49th session): in each engine process that loads it (PYTHONPATH=<this folder>, INST_OUT set), per batch
size, decode iterations that follow a decode iteration of the same size (nothing else between, < 1 s apart): their
count, the model forwards they ran (a plain burst runs up to 4 per iteration), the wall time between successive
Scheduler.run_batch calls and the time inside ModelRunner.forward; written to $INST_OUT as JSON every 20 iterations."""

import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time

_T = ("sglang.srt.managers.scheduler", "sglang.srt.model_executor.model_runner")
_S = {"t0": None, "bs": 0, "clean": True, "fw": 0.0, "nf": 0, "acc": {}}
OUT = os.environ.get("INST_OUT")


def _patch_runner(mod):
    orig = mod.ModelRunner.forward

    @functools.wraps(orig)
    def forward(self, fb, *a, **k):
        s = time.perf_counter()
        try:
            return orig(self, fb, *a, **k)
        finally:
            if fb.forward_mode.is_decode():
                _S["fw"] += time.perf_counter() - s
                _S["nf"] += 1
            else:
                _S["clean"] = False

    mod.ModelRunner.forward = forward


def _patch_sched(mod):
    orig = mod.Scheduler.run_batch

    @functools.wraps(orig)
    def run_batch(self, batch, *a, **k):
        now = time.perf_counter()
        decode = batch is not None and batch.forward_mode.is_decode()
        bs = len(batch.reqs) if decode else -1
        if _S["t0"] is not None and _S["clean"] and bs == _S["bs"] and now - _S["t0"] < 1.0 and _S["nf"]:
            a_ = _S["acc"].setdefault(str(bs), [0, 0, 0.0, 0.0])
            a_[0] += 1
            a_[1] += _S["nf"]
            a_[2] += now - _S["t0"]
            a_[3] += _S["fw"]
            if OUT and a_[0] % 20 == 0:
                with open(OUT, "w") as f:
                    json.dump(_S["acc"], f)
        _S.update(t0=now if decode else None, bs=bs, clean=True, fw=0.0, nf=0)
        return orig(self, batch, *a, **k)

    mod.Scheduler.run_batch = run_batch


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _T:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        loader = spec.loader
        ex = loader.exec_module

        def exec_and_patch(module):
            ex(module)
            {_T[0]: _patch_sched, _T[1]: _patch_runner}[name](module)

        loader.exec_module = exec_and_patch
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
