"""Scratch (68th session), loaded in every process of a bench run (cp to DIR/sitecustomize.py, PYTHONPATH=DIR:.):
registers the policies "moe-serve-j2", moe-serve with its first judgement after 2 emitted tokens (judge_after=2, the
interval between judgements unchanged) as before this session's FIRST_JUDGE_BESIDE = 1, and "moe-serve-nr", moe-serve
without this session's reset of the judging back-off after a whole judged chain (moe_serve_observe.judged_back_off),
and "moe-serve-nb", moe-serve whose judgements due again are weighed at the bound on what the request measured alone
(as before this session's AcceptanceTracker.if_matched in moe_serve_probe.rejudging_could_pay), and "moe-serve-pw",
moe-serve whose requests' own acceptance weighs the prior as 2 outcomes instead of half of one (landed in the
sixty-ninth session: from then on moe-serve itself), and "moe-serve-nd" (69th), moe-serve whose judgements due
again and declined by rejudging_could_pay leave the judging interval as it was (judge_due doubled it), and
"moe-serve-jr" (69th), moe-serve whose judgements due again are first weighed together (JointRejudge), the
scripted policies "scripted-judge" and "scripted-plain" (69th: K = 0 to a request's 3rd output token, judged at its
2nd or not, K = 4 after), "moe-serve-log" (69th: moe-serve writing its batch-1 decisions to $DECIDE_LOG) and
"moe-serve-pr" (69th: moe-serve pricing accepted drafts by the expert reuse of plain steps only) and "moe-serve-log8"
(72nd: moe-serve writing its decisions of two or more requests to $DECIDE_LOG), "moe-serve-lp" (72nd: moe-serve
whose cost model learns nothing from the plain steps of batches with a request in its first five decode steps), so
that one
bench.policies run measures them interleaved on the same engines (run.py adds the variants)."""

from service.policy import base

base._POLICIES["moe-serve-j2"] = "service.policy.moe_serve_j2_scratch:JudgedAfterTwo"
base._POLICIES["moe-serve-nr"] = "service.policy.moe_serve_j2_scratch:NoBackOffReset"
base._POLICIES["moe-serve-nb"] = "service.policy.moe_serve_j2_scratch:BoundAlone"
base._POLICIES["moe-serve-pw"] = "service.policy.moe_serve_j2_scratch:PriorTwo"
base._POLICIES["moe-serve-nd"] = "service.policy.moe_serve_j2_scratch:NoDoubleOnDecline"
base._POLICIES["moe-serve-jr"] = "service.policy.moe_serve_j2_scratch:JointRejudge"
base._POLICIES["scripted-judge"] = "service.policy.moe_serve_j2_scratch:ScriptedJudge"
base._POLICIES["scripted-plain"] = "service.policy.moe_serve_j2_scratch:ScriptedPlain"
base._POLICIES["moe-serve-log"] = "service.policy.moe_serve_j2_scratch:DecideLog"
base._POLICIES["moe-serve-pr"] = "service.policy.moe_serve_j2_scratch:PlainReuse"
base._POLICIES["moe-serve-log8"] = "service.policy.moe_serve_j2_scratch:DecideLog8"
base._POLICIES["moe-serve-lp"] = "service.policy.moe_serve_j2_scratch:LatePlain"


def _module():
    import sys
    import types

    from service.policy.moe_serve import MoeServePolicy

    class JudgedAfterTwo(MoeServePolicy):
        def __init__(self, **params):
            super().__init__(**{"judge_after": 2, **params})

    class NoBackOffReset(MoeServePolicy):
        def observe(self, stats):
            kept = (dict(self._idle), dict(self._interval))
            super().observe(stats)  # judged_back_off is the only writer of these in observe
            self._idle, self._interval = kept

    class BoundAlone(MoeServePolicy):
        def _rejudging_could_pay(self, i, probs, caps, batch):
            from service.policy.moe_serve_probe import _upper
            from service.policy.slo import step_time_cap

            rid = batch.requests[i].request_id
            n = self.accept.observed(rid)
            trial = list(probs)
            trial[i] = [_upper(p, n) for p in self.accept.get(rid)]
            return self.allocate(trial, caps, step_time_cap(batch), drafting=True, layout=batch)[i] > 0

    from service.policy.acceptance import AcceptanceTracker, _Estimate

    class EstimatePW(_Estimate):
        def add(self, i, outcome, alpha, trust):  # the prior counts as 2 outcomes, not half of one
            self._blended = None
            weight = max(alpha, 1.0 / (self.seen[i] + 3.0))
            self.ema[i] += weight * (outcome - self.ema[i])
            self.seen[i] = min(self.seen[i] + 1.0, trust)

    class TrackerPW(AcceptanceTracker):
        def _estimate(self, request_id):
            est = self._per_request.get(request_id)
            if est is None:
                est = self._per_request[request_id] = EstimatePW(list(self.prior))
            return est

    class PriorTwo(MoeServePolicy):
        def __init__(self, **params):
            super().__init__(**params)
            self.accept.__class__ = TrackerPW

    class NoDoubleOnDecline(MoeServePolicy):
        def _rejudging_could_pay(self, i, probs, caps, batch):  # a declined judgement leaves the interval undoubled
            ok = super()._rejudging_could_pay(i, probs, caps, batch)
            if not ok:
                rid = batch.requests[i].request_id
                self._interval[rid] = max(self._interval[rid] // 2, self.judge_after)
            return ok

    class JointRejudge(MoeServePolicy):
        """Judgements due again weighed first together: one allocation with every request that may draft raised to
        rejudging_could_pay's trial acceptance; where none of them would speculate, each is declined without its own
        allocation (at batch 8 the eight due together took ~4 ms of policy time at steps 3, 7 and 15)."""

        _jr_key = None
        _jr_none = False

        def _rejudging_could_pay(self, i, probs, caps, batch):
            from service.policy.moe_serve_probe import _upper
            from service.policy.slo import step_time_cap

            key = (id(batch), self._steps)
            if self._jr_key != key:
                self._jr_key = key
                trial = list(probs)
                for j, r in enumerate(batch.requests):
                    if caps[j] > 0:
                        rid = r.request_id
                        bound = [_upper(p, self.accept.observed(rid)) for p in self.accept.get(rid)]
                        depth = max(min(self.k_max, batch.max_k), 1)
                        matched = self.accept.if_matched(rid, r.draft_backlog, depth)
                        trial[j] = [max(a, b) for a, b in zip(bound, matched, strict=True)]
                ks = self.allocate(trial, caps, step_time_cap(batch), drafting=True, layout=batch)
                self._jr_none = not any(ks)
            if self._jr_none:
                return False
            return super()._rejudging_could_pay(i, probs, caps, batch)

    from service.policy.base import plan

    class ScriptedJudge:
        """K = 0 for a request's first output tokens, judged (Decision.judge) at its 2nd, K = 4 from its 3rd on: what
        moe-serve does to a prose request whose first judgement finds its drafts accepted."""

        judged = True

        def __init__(self, **params):
            self.k = params.get("k", 4)

        def decide(self, batch):
            ks = [0 if r.tokens_so_far < 3 else self.k for r in batch.requests]
            judge = frozenset(r.request_id for r in batch.requests if self.judged and r.tokens_so_far == 2)
            return plan(batch, ks, None, judge if batch.judging else frozenset())

        def trim(self, batch, decision):
            return decision

        def observe(self, stats):
            return None

    class ScriptedPlain(ScriptedJudge):
        """ScriptedJudge without the judgement: its first draft forward catches the draft model up itself."""

        judged = False

    def _cal(model):
        """The batch-1 bucket's calibration: measured / predicted per (draft steps, mostly accepted) and for plain
        steps."""
        from service.policy.cost_model import batch_bucket

        c = model._calibration.get(batch_bucket(1))
        plain = model._plain_calibration.get(batch_bucket(1))
        out = {} if c is None else {f"d{d}": round(c.ratio_for(d, 0.9), 3) for d in (1, 2, 3, 4)}
        out |= {} if c is None else {f"d{d}r": round(c.ratio_for(d, 0.1), 3) for d in (1, 2, 3, 4)}
        out["plain"] = None if plain is None else round(plain.ratio, 3)
        return out

    class DecideLog(MoeServePolicy):
        """moe-serve, each batch-1 decision of a request that has its own acceptance appended to $DECIDE_LOG: tokens so
        far and left, its p per position, the K chosen, and the predicted step time and J at K = 0..4 (the allocation's
        objective with its own p)."""

        def decide(self, batch):
            import json
            import os
            import time

            from service.policy.slo import step_time_cap

            d = super().decide(batch)
            if len(batch.requests) == 1 and os.environ.get("DECIDE_LOG"):
                r = batch.requests[0]
                rid = r.request_id
                if self.accept.observed(rid) > 0:
                    p = self.accept.get(rid)
                    chains = self._chains([p], [min(self.k_max, batch.max_k)])
                    cap = step_time_cap(batch)
                    rows = []
                    for k in range(min(self.k_max, batch.max_k) + 1):
                        over, j = self._objective([k], chains, cap, True, batch)
                        rows.append([k, round(self._time([k], True, batch, chains) * 1e3, 2), round(j * 1e3, 3)])
                    rec = {
                        "t": time.time(),
                        "rid": rid[:6],
                        "so_far": r.tokens_so_far,
                        "left": r.tokens_left,
                        "backlog": r.draft_backlog,
                        "p": [round(x, 3) for x in p],
                        "k": d.requests[0].k,
                        "judge": bool(d.judge),
                        "rest": list(d.rest_until),
                        "t_j": rows,
                        "cal": _cal(self.model),
                        "own": self._own_memo.get(rid),
                        "reuse": self._reuse.get(rid),
                    }
                    with open(os.environ["DECIDE_LOG"], "a") as f:
                        f.write(json.dumps(rec) + "\n")
            return d

    class PlainReuse(MoeServePolicy):
        """moe-serve pricing accepted drafts by the expert reuse of plain steps only (as before the sixty-ninth
        session's verify.accepted_reuse: the engine measured none on verify steps)."""

        def observe(self, stats):
            from dataclasses import replace

            if not stats.plain:
                stats = replace(stats, requests=tuple(replace(r, expert_reuse=None) for r in stats.requests))
            super().observe(stats)

    class DecideLog8(MoeServePolicy):
        """moe-serve, each decision of two or more requests appended to $DECIDE_LOG: the requests' tokens so far, p
        (first four positions) and K chosen, the step time and J predicted for that choice and for K = 0 throughout,
        whether the batch size's speculative steps were calibrated, and their ratios (draft depth 1-4, mostly
        accepted or not)."""

        def decide(self, batch):
            import json
            import os
            import time

            from service.policy.cost_model import batch_bucket
            from service.policy.slo import step_time_cap

            d = super().decide(batch)
            reqs = batch.requests
            if len(reqs) > 1 and os.environ.get("DECIDE_LOG"):
                ks = [x.k for x in d.requests]
                probs = [self.accept.get(r.request_id) for r in reqs]
                chains = self._chains(probs, [min(self.k_max, batch.max_k)] * len(reqs))
                cap = step_time_cap(batch)
                zero = [0] * len(reqs)
                c = self.model._calibration.get(batch_bucket(len(reqs)))
                rec = {
                    "t": time.time(),
                    "rids": [r.request_id[:6] for r in reqs],
                    "so_far": [r.tokens_so_far for r in reqs],
                    "backlog": [r.draft_backlog for r in reqs],
                    "p": [[round(x, 3) for x in q[:4]] for q in probs],
                    "k": ks,
                    "judge": len(d.judge),
                    "t_ms": round(self._time(ks, True, batch, chains) * 1e3, 2),
                    "t0_ms": round(self._time(zero, True, batch, chains) * 1e3, 2),
                    "j": round(self._objective(ks, chains, cap, True, batch)[1] * 1e3, 3),
                    "j0": round(self._objective(zero, chains, cap, True, batch)[1] * 1e3, 3),
                    "calibrated": self.model.calibrated(len(reqs)),
                    "cal": None
                    if c is None
                    else {
                        f"d{k}{'' if m else 'r'}": round(c.ratio_for(k, 0.9 if m else 0.1), 3)
                        for k in (1, 2, 3, 4)
                        for m in (True, False)
                    },
                }
                with open(os.environ["DECIDE_LOG"], "a") as f:
                    f.write(json.dumps(rec) + "\n")
            return d

    class LatePlain(MoeServePolicy):
        """moe-serve whose cost model is not fed the plain steps of two or more requests where one of them is within
        its first five decode steps (counted per request from the steps observed): a wave's first decode steps took
        21 ms falling to ~14.5 by the sixth at batch 8 (zen5-b8-s72 run 5), and where moe-serve speculates from a
        wave's third step those first two were the only plain steps it priced K = 0 from (run 4)."""

        EARLY = 5

        def observe(self, stats):
            seen = self.__dict__.setdefault("_decode_steps", {})
            early = min((seen.get(r.request_id, 0) for r in stats.requests), default=0) < self.EARLY
            for r in stats.requests:
                seen[r.request_id] = seen.get(r.request_id, 0) + 1
            if not (stats.plain and stats.batch_size > 1 and early):
                return super().observe(stats)
            self.model.add = lambda *a, **k: None  # this step teaches the cost model nothing
            try:
                return super().observe(stats)
            finally:
                del self.model.add

    module = types.ModuleType("service.policy.moe_serve_j2_scratch")
    module.JudgedAfterTwo = JudgedAfterTwo
    module.NoBackOffReset = NoBackOffReset
    module.BoundAlone = BoundAlone
    module.PriorTwo = PriorTwo
    module.NoDoubleOnDecline = NoDoubleOnDecline
    module.JointRejudge = JointRejudge
    module.ScriptedJudge = ScriptedJudge
    module.ScriptedPlain = ScriptedPlain
    module.DecideLog = DecideLog
    module.PlainReuse = PlainReuse
    module.DecideLog8 = DecideLog8
    module.LatePlain = LatePlain
    sys.modules[module.__name__] = module


class _Finder:
    """Builds the scratch module on its first import (service.policy.moe_serve is importable only then)."""

    def find_spec(self, name, path=None, target=None):
        if name != "service.policy.moe_serve_j2_scratch":
            return None
        _module()
        import importlib.util

        return importlib.util.spec_from_loader(name, _Loader())


class _Loader:
    def create_module(self, spec):
        import sys

        return sys.modules[spec.name]

    def exec_module(self, module):
        pass


import sys  # noqa: E402

sys.meta_path.insert(0, _Finder())
