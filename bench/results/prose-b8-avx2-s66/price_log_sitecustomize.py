"""Scratch (66th session): moe-serve's batch >= 4 allocations logged to $PRICE_LOG (one JSON line per decide with a
draft allowed): chosen K, each request's p, J and T predicted at the chosen K and at K = 0, the cost model's error,
calibration ratios. Loaded as sitecustomize in every process; patches service.policy.moe_serve at its import."""

import importlib.abc
import importlib.util
import json
import os
import sys
import time

OUT = os.environ.get("PRICE_LOG")
_T = "service.policy.moe_serve"


def _w(rec):
    with open(OUT, "a") as f:
        f.write(json.dumps(rec, default=str) + "\n")


def _patch(mod):
    P = mod.MoeServePolicy
    orig_alloc = P.allocate

    def allocate(self, probs, caps, cap_s, drafting, layout=None, model=None):
        ks = orig_alloc(self, probs, caps, cap_s, drafting, layout, model)
        try:
            if layout is not None and len(caps) >= 4 and drafting:
                m = model or self._priced_for(layout.requests)
                zero = [0] * len(caps)
                rec = {
                    "t": time.time(),
                    "ev": "alloc",
                    "bs": len(caps),
                    "ks": ks,
                    "caps": caps,
                    "scout": model is not None,
                    "p": [[round(x, 3) for x in p[:3]] for p in probs],
                    "err": self.model.error(len(caps), max(ks, default=0) or None),
                    "calibrated": self.model.calibrated(len(caps)),
                }
                for name, k in (("zero", zero), ("chosen", ks)) + tuple(
                    (f"d{d}", [min(d, c) for c in caps]) for d in (1, 2, 3)
                ):
                    ch = self._chains(probs, k)
                    o = self._objective(k, ch, float("inf"), True, layout, model=m)
                    rec[name] = {
                        "J_ms": round(o[1] * 1e3, 3),
                        "T_ms": round(self._time(k, True, layout, ch, True, m) * 1e3, 2),
                    }
                _w(rec)
        except Exception as e:  # noqa
            _w({"ev": "err", "err": repr(e)})
        return ks

    P.allocate = allocate


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _T:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        orig = loader.exec_module

        def exec_module(module):
            orig(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
