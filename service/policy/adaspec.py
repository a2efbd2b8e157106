"""`adaspec`: SLO-aware adaptive speculation driven by draft confidence (AdaSpec, issue 4).

  acceptance   P(draft i of request r accepted) = Π_{j<=i} c_rj, c_rj = drafter confidences; before drafting,
               c_rj = c̄_r, the request's running-mean confidence (prior: a batch-wide running mean starting at 0.6)
  throughput   Θ = Σ_r (1 + Σ_{i<=len_r} P_ri) / T,   T = linear step-time model (adaspec_time), fitted by least squares
  SLO          T > cap (tightest TPOT target in the batch) scores negative, so it is never chosen (slo.score)
  predict      (decide) one draft length k for the batch: grow k from 0 while Θ(k+1) > Θ(k)  (Θ is unimodal in k)
  correct      (trim) with real confidences, keep the longest prefix k' <= k over which Θ kept rising
  eliminate    (trim) drop the lowest-P tail token in the batch while that raises Θ → per-request verify lengths
Draft time is already spent when trimming, so trimming prices verify tokens only.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from service.policy.adaspec_time import LinearStepTime
from service.policy.base import plan
from service.policy.slo import score, step_time_cap
from service.policy.types import BatchView, Decision, RequestDecision, StepStats

# seconds: fixed, per verify token, per context token, per draft step, per draft token (a small-GPU profile)
DEFAULT_PRIOR = (8e-3, 1e-4, 1e-7, 1e-3, 2e-5)


class AdaSpecPolicy:
    def __init__(
        self,
        k_max: int = 7,
        prior: tuple[float, float, float, float, float] = DEFAULT_PRIOR,
        confidence_prior: float = 0.6,
        refit_every: int = 16,
    ) -> None:
        if k_max < 0 or not 0 < confidence_prior < 1 or refit_every < 1:
            raise ValueError("adaspec: need k_max >= 0, 0 < confidence_prior < 1, refit_every >= 1")
        self.k_max = k_max
        self.time = LinearStepTime(prior)
        self.refit_every = refit_every
        self.mean_conf = confidence_prior  # batch-wide running mean confidence
        self._seen = 0  # confidences folded into mean_conf
        self._per_request: dict[str, tuple[float, int]] = {}  # id -> (running mean confidence, count)
        self._steps = 0

    def confidence(self, request_id: str) -> float:
        mean, count = self._per_request.get(request_id, (self.mean_conf, 0))
        return mean if count else self.mean_conf

    def _time(self, batch: BatchView, verify_tokens: int, draft_steps: int, draft_tokens: int) -> float:
        context = sum(r.context_len for r in batch.requests)
        return self.time.predict(verify_tokens, context, draft_steps, draft_tokens)

    def decide(self, batch: BatchView) -> Decision:
        n = len(batch.requests)
        if len(self._per_request) > 2 * n + 16:
            live = {r.request_id for r in batch.requests}
            self._per_request = {k: v for k, v in self._per_request.items() if k in live}
        conf = [self.confidence(r.request_id) for r in batch.requests]
        run = [1.0] * n  # Π c̄^i so far per request
        tokens = float(n)
        cap = step_time_cap(batch)
        best = score(tokens, self._time(batch, n, 0, 0), cap)
        k = 0
        while k < min(self.k_max, batch.max_k):
            gain = 0.0
            for i in range(n):
                run[i] *= conf[i]
                gain += run[i]
            nxt = score(tokens + gain, self._time(batch, n * (k + 2), k + 1, n * (k + 1)), cap)
            if nxt <= best:
                break
            k, best, tokens = k + 1, nxt, tokens + gain
        return plan(batch, [k] * n)

    def trim(self, batch: BatchView, decision: Decision) -> Decision:
        accept = []  # per request: P(accept draft i) for i = 1..k
        for r, d in zip(batch.requests, decision.requests, strict=True):
            conf = list(r.draft_confidences[: d.k])
            conf += [self.confidence(r.request_id)] * (d.k - len(conf))  # engine gave none: predict them
            p, run = [], 1.0
            for c in conf:
                run *= c
                p.append(run)
            accept.append(p)
        self._learn(batch)
        lens = self.trim_lengths(batch, accept)
        return Decision(
            requests=tuple(
                RequestDecision(d.request_id, d.k, ln) for d, ln in zip(decision.requests, lens, strict=True)
            ),
            expert_budget=decision.expert_budget,
        )

    def trim_lengths(self, batch: BatchView, accept: list[list[float]]) -> list[int]:
        """Correct, then eliminate (module docstring); accept[r][i] = P(draft i+1 of r accepted)."""
        return self.eliminate(batch, accept, self.correct(batch, accept))

    def throughput(self, batch: BatchView, accept: list[list[float]], lens: list[int]) -> float:
        """Predicted Θ of verifying lens[r] drafts of each request, drafting (all of `accept`) already done."""
        tokens = sum(1.0 + sum(p[:ln]) for p, ln in zip(accept, lens, strict=True))
        return self._theta(batch, accept)(tokens, sum(lens) + len(lens))

    def _theta(self, batch: BatchView, accept: list[list[float]]) -> Callable[[float, int], float]:
        draft_steps = max((len(p) for p in accept), default=0)
        drafted = sum(len(p) for p in accept)
        context = sum(r.context_len for r in batch.requests)
        cap = step_time_cap(batch)
        return lambda tokens, verify: score(tokens, self.time.predict(verify, context, draft_steps, drafted), cap)

    def correct(self, batch: BatchView, accept: list[list[float]]) -> list[int]:
        """The longest common prefix over which predicted Θ kept rising (per request capped at what it drafted)."""
        theta = self._theta(batch, accept)
        n = len(accept)
        lens, tokens, verify = [0] * n, float(n), n
        best = theta(tokens, verify)
        for k in range(1, max((len(p) for p in accept), default=0) + 1):
            gain = sum(p[k - 1] for p in accept if len(p) >= k)
            added = sum(1 for p in accept if len(p) >= k)
            s = theta(tokens + gain, verify + added)
            if s <= best:
                break
            best, tokens, verify = s, tokens + gain, verify + added
            lens = [min(k, len(p)) for p in accept]
        return lens

    def eliminate(self, batch: BatchView, accept: list[list[float]], lens: list[int]) -> list[int]:
        """Drop the lowest-acceptance tail draft across the batch while that raises predicted Θ."""
        theta = self._theta(batch, accept)
        lens = list(lens)
        tokens = sum(1.0 + sum(p[:ln]) for p, ln in zip(accept, lens, strict=True))
        verify = sum(lens) + len(lens)
        best = theta(tokens, verify)
        tails = [(accept[i][ln - 1], i) for i, ln in enumerate(lens) if ln > 0]
        heapq.heapify(tails)
        while tails:
            p_tail, i = tails[0]
            s = theta(tokens - p_tail, verify - 1)
            if s <= best:
                break
            heapq.heappop(tails)
            best, tokens, verify = s, tokens - p_tail, verify - 1
            lens[i] -= 1
            if lens[i] > 0:
                heapq.heappush(tails, (accept[i][lens[i] - 1], i))
        return lens

    def _learn(self, batch: BatchView) -> None:
        for r in batch.requests:
            mean, count = self._per_request.get(r.request_id, (0.0, 0))
            for c in r.draft_confidences:
                count += 1
                mean += (c - mean) / count
                self._seen += 1
                self.mean_conf += (c - self.mean_conf) / min(self._seen + 1, 1000)  # the prior counts once
            if count:
                self._per_request[r.request_id] = (mean, count)

    def observe(self, stats: StepStats) -> None:
        self.time.add(stats)
        self._steps += 1
        if self._steps % self.refit_every == 0:
            self.time.refit()
