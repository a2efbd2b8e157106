"""Scratch (74th session), loaded in every process of a bench run (PYTHONPATH=bench/results/doubt-s74:.): registers
"moe-serve-nodoubt", moe-serve whose drafts need not beat K = 0 at the doubted acceptance (acceptance_doubt=0: as
before this session's change to moe_serve_allocate's margin), and "moe-serve-doubt2", at two standard errors, so that
one bench.policies run measures them interleaved with moe-serve on the same engines (run.py adds the variants). With
$RID_LOG set, each of them and moe-serve itself appends {"rid", "policy", "step": [k, judged]} per request and decision
there, so that a step log's requests can be told apart by policy (rids.py); with $DECIDE_LOG set, each batch-1 decision
of a request with its own acceptance is appended there: tokens so far, p and its standard errors per position, the K
chosen, and for K = 0..cap the allocation's J at p and at p lowered by z standard errors for each z of DOUBTS, with
the cost model's error margin (counterfactual.py replays the allocation at each z)."""

from service.policy import base

DOUBTS = (0.25, 0.5, 0.75, 1.0, 1.5)

base._POLICIES["moe-serve"] = "service.policy.moe_serve_doubt_scratch:Logged"
base._POLICIES["moe-serve-nodoubt"] = "service.policy.moe_serve_doubt_scratch:NoDoubt"
base._POLICIES["moe-serve-doubt2"] = "service.policy.moe_serve_doubt_scratch:DoubtTwo"


def _module():
    import sys
    import types

    from service.policy.moe_serve import MoeServePolicy

    class Logged(MoeServePolicy):
        def decide(self, batch):
            import json
            import os

            d = super().decide(batch)
            if os.environ.get("RID_LOG"):
                with open(os.environ["RID_LOG"], "a") as f:
                    for r in d.requests:
                        rec = {"rid": r.request_id, "policy": self.tag, "n": len(d.requests), "k": r.k}
                        f.write(json.dumps({**rec, "judged": r.request_id in d.judge}) + "\n")
            if os.environ.get("DECIDE_LOG") and len(batch.requests) == 1:
                self._log_decision(batch, d, os.environ["DECIDE_LOG"])
            return d

        def _log_decision(self, batch, d, path):
            import json
            import time

            from service.policy.moe_serve_allocate import MIN_MARGIN
            from service.policy.slo import step_time_cap

            r = batch.requests[0]
            rid = r.request_id
            if self.accept.observed(rid) == 0 or r.tokens_so_far < self._rest_until.get(rid, 0):
                return
            cap_k = min(self.k_max, batch.max_k, max(r.tokens_left or 0, 0))
            p = self.accept.get(rid)
            spread = self.accept._estimate(rid).spread(self.accept.trust)
            cap = step_time_cap(batch)
            rows = []
            for k in range(cap_k + 1):
                chains = self._chains([p], [cap_k])
                j = self._objective([k], chains, cap, True, batch)[1]
                lows = []
                for z in DOUBTS:
                    low = [max(0.0, a - z * e) for a, e in zip(p, spread, strict=True)]
                    lows.append(self._objective([k], self._chains([low], [cap_k]), cap, True, batch)[1])
                error = max(self.model.error(1, k) or 0.0, MIN_MARGIN) if k else 0.0
                rows.append({"k": k, "j": j, "j_low": lows, "error": error})
            rec = {"t": time.time(), "policy": self.tag, "rid": rid, "tokens_so_far": r.tokens_so_far}
            rec.update(tokens_left=r.tokens_left, p=p, spread=spread, chosen=d.requests[0].k, rows=rows)
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")

        tag = "moe-serve"

    class NoDoubt(Logged):
        tag = "moe-serve-nodoubt"

        def __init__(self, **params):
            super().__init__(**{"acceptance_doubt": 0.0, **params})

    class DoubtTwo(Logged):
        tag = "moe-serve-doubt2"

        def __init__(self, **params):
            super().__init__(**{"acceptance_doubt": 2.0, **params})

    module = types.ModuleType("service.policy.moe_serve_doubt_scratch")
    module.Logged, module.NoDoubt, module.DoubtTwo = Logged, NoDoubt, DoubtTwo
    sys.modules[module.__name__] = module


class _Finder:
    """Builds the scratch module on its first import (service.policy.moe_serve is importable only then)."""

    def find_spec(self, name, path=None, target=None):
        if name != "service.policy.moe_serve_doubt_scratch":
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
