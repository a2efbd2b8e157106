"""Scratch (61st session): moe-serve's per-request acceptance with the cross-request prior kept as a standing prior of
STANDING_PRIOR pseudo-outcomes, p_i = (n_i * own_i + m * prior_i) / (n_i + m), n_i = min(outcomes at i, 1 / alpha)
(the EMA's memory), instead of the prior fading after the first outcomes; only trackers with alpha >= 0.2 (moe-serve's
own-acceptance tracker, not its by-depth one). Loaded as `sitecustomize` by every Python process: cp this file
DIR/sitecustomize.py; STANDING_PRIOR=2 PYTHONPATH=DIR:. python -m bench.policies ... (unset: unchanged)."""

import os

M = float(os.environ.get("STANDING_PRIOR", "0") or 0)
if M > 0:
    from service.policy import acceptance

    plain_get = acceptance.AcceptanceTracker.get

    def get(self, request_id):
        own = plain_get(self, request_id)
        if self.alpha < 0.2:
            return own
        est, prior, memory = self._estimate(request_id), self.prior, 1.0 / self.alpha
        out = []
        for i, p in enumerate(own):
            n = min(est.seen[i], memory)
            out.append((n * p + M * prior[i]) / (n + M))
        return out

    acceptance.AcceptanceTracker.get = get
