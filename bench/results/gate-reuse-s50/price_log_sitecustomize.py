"""Scratch (49th session; the batch-1 `gate_detail` records added in the 50th): moe-serve's first-judgement gate (judgement_cost against hoped_gain, the fitted coefficients,
the calibration ratios, the request's expert reuse), its rejudging answers and batch-1 decisions (J per K at the
request's own acceptance) appended to $PRICE_LOG as JSON lines, from the engine's scheduler process. usage:
PRICE_LOG=/tmp/p.jsonl PYTHONPATH=<this folder> python -m bench.policies --no-peer --drafters standalone ... (this
file is loaded as `sitecustomize` by every Python process; it patches service.policy.moe_serve when imported)."""

import functools
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


def _cal(model):
    out = {}
    for b, c in model._calibration.items():
        if c.measured:
            out[f"s{b}"] = {
                f"{d}{'a' if a > 0.5 else 'r'}": round(c.ratio_for(d, a), 2) for d in (1, 2, 3) for a in (0.9, 0.1)
            }
            out[f"s{b}"]["n"] = c._added
    for b, c in model._plain_calibration.items():
        out[f"p{b}"] = round(c.ratio, 2)
    return out


def _patch(mod):
    from service.policy import moe_serve_probe as probe

    P = mod.MoeServePolicy

    def jp(self, group, ks, probs, caps, batch, hope=None):
        cost = probe.judgement_cost(self, group, batch)
        gain = probe.hoped_gain(self, group, ks, probs, caps, batch, hope)
        r = batch.requests
        c = self.model.coef
        _w(
            {
                "t": time.time(),
                "ev": "judge_gate",
                "bs": len(r),
                "group": [r[i].request_id[:6] for i in group],
                "so_far": [r[i].tokens_so_far for i in group],
                "left": [r[i].tokens_left for i in group],
                "backlog": [r[i].draft_backlog for i in group],
                "cost_ms": cost * 1e3,
                "gain_ms": gain * 1e3,
                "hope": hope,
                "per_draft_step_ms": c.per_draft_step * 1e3,
                "per_backlog_us": c.per_backlog_token * 1e6,
                "verify_fixed_ms": c.verify_fixed * 1e3,
                "per_expert_us": c.per_expert * 1e6,
                "per_token_us": c.per_token * 1e6,
                "judge130_ms": self.model.judgement_time(130) * 1e3,
                "cal": _cal(self.model),
                "reuse": [self._reuse.get(r[i].request_id) for i in group],
            }
        )
        if len(r) == 1:
            try:
                from dataclasses import replace

                paid = replace(batch, requests=tuple(replace(q, draft_backlog=0) for q in r))
                hm = self._priced_for(r).hoped()
                now = self._objective(ks, self._chains(probs, ks), float("inf"), True, paid)[1]
                js = []
                for d in range(1, 5):
                    hp = [[0.8] * d]
                    js.append(
                        round(
                            self._objective([d], self._chains(hp, [d]), float("inf"), True, paid, model=hm)[1] * 1e3, 2
                        )
                    )
                steps = {}
                for n, a in ((1, None), (2, 1.0), (2, 0.0), (4, 3.0), (4, 0.0), (4, 1.95)):
                    steps[f"{n}/{a}"] = round(hm.step_time(n, 1, n - 1, n - 1, None, 0, a) * 1e3, 2)
                _w(
                    {
                        "ev": "gate_detail",
                        "rid": r[0].request_id[:6],
                        "now_ms": round(now * 1e3, 2),
                        "J_hoped_by_depth": js,
                        "steps_ms": steps,
                        "other_spec": round(hm.other_time(False, 1) * 1e3, 2),
                        "extra": round(c.verify_extra * 1e3, 2),
                        "draft_step": round(c.per_draft_step * 1e3, 2),
                        "fresh_acc": hm._fresh_accepted,
                        "own": hm._own_ratio,
                    }
                )
            except Exception as e:
                _w({"ev": "gate_detail_err", "err": repr(e)})
        return cost <= gain if all(r[i].tokens_left is not None for i in group) else True

    P._judgements_pay = jp
    orig_rj = P._rejudging_could_pay

    def rj(self, i, probs, caps, batch):
        out = orig_rj(self, i, probs, caps, batch)
        r = batch.requests[i]
        _w(
            {
                "t": time.time(),
                "ev": "rejudge",
                "bs": len(batch.requests),
                "rid": r.request_id[:6],
                "so_far": r.tokens_so_far,
                "left": r.tokens_left,
                "p": [round(x, 3) for x in self.accept.get(r.request_id)],
                "obs": self.accept.observed(r.request_id),
                "pays": out,
            }
        )
        return out

    P._rejudging_could_pay = rj
    orig = P.decide

    @functools.wraps(orig)
    def decide(self, batch):
        d = orig(self, batch)
        r = batch.requests
        if len(r) == 1 and (d.judge or any(q.k for q in d.requests) or self.accept.observed(r[0].request_id)):
            rid = r[0].request_id
            rec = {
                "t": time.time(),
                "ev": "decide",
                "rid": rid[:6],
                "so_far": r[0].tokens_so_far,
                "left": r[0].tokens_left,
                "ks": [q.k for q in d.requests],
                "judge": bool(d.judge),
                "obs": self.accept.observed(rid),
                "p": [round(x, 3) for x in self.accept.get(rid)],
                "rest_until": list(getattr(d, "rest_until", ()) or ()),
                "bs": len(r),
            }
            try:
                probs = [self.accept.get(rid)]
                model = self._priced_for(r)
                J = []
                for k in range(0, 5):
                    J.append(
                        round(
                            self._objective([k], self._chains(probs, [k]), float("inf"), True, batch, model=model)[1]
                            * 1e3,
                            2,
                        )
                    )
                rec["J_ms_by_k"] = J
            except Exception as e:
                rec["J_err"] = repr(e)
            _w(rec)
        return d

    P.decide = decide


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _T:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        ex = spec.loader.exec_module

        def exec_and_patch(module):
            ex(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
