"""Scratch (74th session): the policy classes sitecustomize.py beside this file registers (its docstring says what
each does); a module of this folder, which is on every engine process's path (PYTHONPATH=bench/results/doubt-s74:.),
imported when a policy of it is first built."""

from service.policy.moe_serve import MoeServePolicy

DOUBTS = (0.25, 0.5, 0.75, 1.0, 1.5)


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
        chains = self._chains([p], [cap_k])
        lowered = [
            self._chains([[max(0.0, a - z * e) for a, e in zip(p, spread, strict=True)]], [cap_k]) for z in DOUBTS
        ]
        rows = []
        for k in range(cap_k + 1):
            j = self._objective([k], chains, cap, True, batch)[1]
            lows = [self._objective([k], low, cap, True, batch)[1] for low in lowered]
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
