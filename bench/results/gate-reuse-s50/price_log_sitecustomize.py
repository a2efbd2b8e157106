"""Scratch (50th session): judge-fit-s49's price log (../judge-fit-s49/price_log_sitecustomize.py, loaded from there:
first-judgement gates, rejudging answers, batch-1 decisions) plus a `gate_detail` record after each batch-1 gate:
J now and J at depths 1-4 with drafts hoped at 0.8, the step prices of a plain step and of 1- and 3-draft steps by
drafts accepted, the spec-step other time, verify_extra, per_draft_step, the fresh routings per accepted draft and the
own-cost ratio, all from `_priced_for(...).hoped()`, i.e. at the request's mean reuse (as the gate priced before
81b184d; the judge_gate record's gain is the gate's own). usage, from the repository root (the s49 logger is found
from there): cp this file DIR/sitecustomize.py; PRICE_LOG=/tmp/p.jsonl PYTHONPATH=DIR python -m bench.policies
--no-peer --drafters standalone ..."""

import importlib.util
import os
from dataclasses import replace
from pathlib import Path

_BASE = Path("bench/results/judge-fit-s49/price_log_sitecustomize.py").resolve()
_spec = importlib.util.spec_from_file_location("price_log_s49", _BASE)
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)  # with PRICE_LOG set, it hooks service.policy.moe_serve's import (its `_patch`)


def _detail(self, ks, probs, batch):
    r = batch.requests
    c = self.model.coef
    paid = replace(batch, requests=tuple(replace(q, draft_backlog=0) for q in r))
    hoped = self._priced_for(r).hoped()
    now = self._objective(ks, self._chains(probs, ks), float("inf"), True, paid)[1]
    js = []
    for d in range(1, 5):
        chains = self._chains([[0.8] * d], [d])
        js.append(round(self._objective([d], chains, float("inf"), True, paid, model=hoped)[1] * 1e3, 2))
    steps = {
        f"{n}/{a}": round(hoped.step_time(n, 1, n - 1, n - 1, None, 0, a) * 1e3, 2)
        for n, a in ((1, None), (2, 1.0), (2, 0.0), (4, 3.0), (4, 0.0), (4, 1.95))
    }
    return {
        "ev": "gate_detail",
        "rid": r[0].request_id[:6],
        "now_ms": round(now * 1e3, 2),
        "J_hoped_by_depth": js,
        "steps_ms": steps,
        "other_spec": round(hoped.other_time(False, 1) * 1e3, 2),
        "extra": round(c.verify_extra * 1e3, 2),
        "draft_step": round(c.per_draft_step * 1e3, 2),
        "fresh_acc": hoped._fresh_accepted,
        "own": hoped._own_ratio,
    }


def _patch(mod):
    base_patch(mod)
    P = mod.MoeServePolicy
    gate = P._judgements_pay  # the s49 logger's

    def jp(self, group, ks, probs, caps, batch, hope=None):
        out = gate(self, group, ks, probs, caps, batch, hope)
        if len(batch.requests) == 1:
            try:
                base._w(_detail(self, ks, probs, batch))
            except Exception as e:
                base._w({"ev": "gate_detail_err", "err": repr(e)})
        return out

    P._judgements_pay = jp


base_patch = base._patch
if os.environ.get("PRICE_LOG"):
    base._patch = _patch  # what the s49 module's import hook calls
