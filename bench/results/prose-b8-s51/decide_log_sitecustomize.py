"""Scratch (51st session): gate-reuse-s50's price log (../gate-reuse-s50/price_log_sitecustomize.py, which loads
judge-fit-s49's: first-judgement gates at every batch size, rejudging answers, batch-1 decisions) plus a `decide_b`
record for every decision of a batch of more than one request: per request its tokens so far, K, whether it is
judged, its own first-draft p and outcomes, its rest; with POLICY_SNAPSHOTS=<folder>, the policy and the batch
pickled at each such decision that keeps every request at K = 0 after some request measured its acceptance, and
the policy and the gate's arguments at each first-judgement gate of such a batch that did not pay. usage, from the repository root: cp this file
DIR/sitecustomize.py; PRICE_LOG=/tmp/p.jsonl PYTHONPATH=DIR python -m bench.policies --no-peer --drafters standalone
..."""

import importlib.util
import os
import pickle
import time
from pathlib import Path

_S50 = Path("bench/results/gate-reuse-s50/price_log_sitecustomize.py").resolve()
_spec = importlib.util.spec_from_file_location("price_log_s50", _S50)
s50 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(s50)
s49 = s50.base  # its import hook calls s49._patch, which s50 set to its own


def _patch(mod):
    previous(mod)
    P = mod.MoeServePolicy
    inner = P.decide

    def decide(self, batch):
        d = inner(self, batch)
        r = batch.requests
        if len(r) > 1:
            s49._w(
                {
                    "t": time.time(),
                    "ev": "decide_b",
                    "bs": len(r),
                    "so_far": [q.tokens_so_far for q in r],
                    "ks": [q.k for q in d.requests],
                    "judge": len(d.judge),
                    "p0": [round(self.accept.get(q.request_id)[0], 2) for q in r],
                    "obs": [self.accept.observed(q.request_id) for q in r],
                    "rest_until": list(d.rest_until or ()),
                }
            )
            snap = os.environ.get("POLICY_SNAPSHOTS")  # a folder: the policy and batch pickled at such decisions
            if (
                snap
                and not any(d.requests[i].k for i in range(len(r)))
                and max(self.accept.observed(q.request_id) for q in r)
            ):
                with open(os.path.join(snap, f"{time.time():.3f}-{os.getpid()}.pkl"), "wb") as f:
                    pickle.dump((self, batch), f)
        return d

    P.decide = decide
    gate = P._judgements_pay

    def judgements_pay(self, group, ks, probs, caps, batch, hope=None):
        out = gate(self, group, ks, probs, caps, batch, hope)
        snap = os.environ.get("POLICY_SNAPSHOTS")  # and at each first-judgement gate of a batch that did not pay
        if snap and not out and len(batch.requests) > 1:
            with open(os.path.join(snap, f"gate-{time.time():.3f}-{os.getpid()}.pkl"), "wb") as f:
                pickle.dump((self, group, ks, probs, caps, batch, hope), f)
        return out

    P._judgements_pay = judgements_pay


previous = s49._patch
if s50.os.environ.get("PRICE_LOG"):
    s49._patch = _patch
