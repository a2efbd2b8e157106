"""scratch: per decode iteration, wall time vs model-forward time, in whatever engine process loads this."""

import functools
import importlib.abc
import importlib.util
import logging
import sys
import time

_T = ("sglang.srt.managers.scheduler", "sglang.srt.model_executor.model_runner", "sglang.srt.managers.tp_worker")
_S = {"t0": None, "bs": 0, "clean": True, "fwd": 0.0, "acc": {}, "parts": {}, "pacc": {}}


def _timed(cls, name, key):
    orig = getattr(cls, name)

    @functools.wraps(orig)
    def wrapper(self, *a, **k):
        s = time.perf_counter()
        try:
            return orig(self, *a, **k)
        finally:
            _S["parts"][key] = _S["parts"].get(key, 0.0) + time.perf_counter() - s

    setattr(cls, name, wrapper)


def _patch_tp(mod):
    _timed(mod.TpModelWorker, "forward_batch_generation", "tp.fbg")


def _patch_runner(mod):
    orig = mod.ModelRunner.forward

    @functools.wraps(orig)
    def forward(self, forward_batch, *a, **k):
        s = time.perf_counter()
        try:
            return orig(self, forward_batch, *a, **k)
        finally:
            _S["fwd"] += time.perf_counter() - s
            if not forward_batch.forward_mode.is_decode():
                _S["clean"] = False

    mod.ModelRunner.forward = forward
    _timed(mod.ModelRunner, "sample", "runner.sample")


def _patch_sched(mod):
    for name in ("get_next_batch_to_run", "process_batch_result", "ingest_requests", "update_running_batch"):
        _timed(mod.Scheduler, name, "sched." + name)
    _timed(mod.Scheduler, "run_batch", "sched.run_batch")
    orig = mod.Scheduler.run_batch

    @functools.wraps(orig)
    def run_batch(self, batch, *a, **k):
        now = time.perf_counter()
        decode = batch is not None and batch.forward_mode.is_decode()
        bs = len(batch.reqs) if decode else -1
        if _S["t0"] is not None and _S["clean"] and bs == _S["bs"] and now - _S["t0"] < 0.5:
            a_ = _S["acc"].setdefault(bs, [0, 0.0, 0.0])
            a_[0] += 1
            a_[1] += now - _S["t0"]
            a_[2] += _S["fwd"]
            p_ = _S["pacc"].setdefault(bs, {})
            for key, v in _S["parts"].items():
                p_[key] = p_.get(key, 0.0) + v
            if a_[0] % 50 == 0:
                n, it, fw = a_
                logging.getLogger("inst").warning(
                    "INSTX bs=%d n=%d iter_us=%.0f fwd_us=%.0f outside_us=%.0f %s",
                    bs,
                    n,
                    it / n * 1e6,
                    fw / n * 1e6,
                    (it - fw) / n * 1e6,
                    " ".join(f"{k}={v / n * 1e6:.0f}" for k, v in sorted(_S["pacc"][bs].items())),
                )
        _S.update(t0=now if decode else None, bs=bs, clean=True, fwd=0.0, parts={})
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
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            {_T[0]: _patch_sched, _T[1]: _patch_runner, _T[2]: _patch_tp}[name](module)

        loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _Finder())
