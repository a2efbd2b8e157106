"""Scratch (67th session): capture moe-serve's decide() calls in the engine for an offline replay (replay.py). Loaded
as `sitecustomize` by every Python process (copy it to DIR as sitecustomize.py; DECIDE_CAPTURE=/tmp/c.pkl
PYTHONPATH=DIR:. python -m bench.policies ...). Before each call the policy and its batch are pickled (decide()
changes the policy); after it, the decision and the call's own time are appended to $DECIDE_CAPTURE as one record."""

import os
import pickle
import time

OUT = os.environ.get("DECIDE_CAPTURE")


def _patch() -> None:
    from service.policy import moe_serve

    decide = moe_serve.MoeServePolicy.decide

    def wrapper(self, batch):
        state = pickle.dumps((self, batch), protocol=5)
        start = time.perf_counter()
        out = decide(self, batch)
        took = time.perf_counter() - start
        with open(OUT, "ab") as f:
            pickle.dump({"pid": os.getpid(), "ms": took * 1e3, "state": state, "decision": out}, f, protocol=5)
        return out

    moe_serve.MoeServePolicy.decide = wrapper


if OUT:
    _patch()
