"""`cascade`: utility-driven test-and-set speculation per request (Cascade, issue 4).

utility   U = ETR / (t_step / t_base),  ETR = mean tokens emitted per step (accepted + 1),
            t_base = plain-decode step time at this batch size; TPOT_spec = TPOT_base / U.
test:     up to M = 4 trials of t = 4 steps; first trial at K_start = the non-zero K with the best recent utility
          (the request's own trials; a new request uses the batch's recent trials, an EMA per K; K = 1 after a
          set phase at K = 0); next K by hill-climbing (cascade_search.next_trial_k).
set:      S steps at K* = argmax_trials U, or K* = 0 when max U < 1.
back-off: S <- 2·S on every set phase at K = 0 (capped); S resets to S0 = 16 when a set phase speculates.
baseline: the first 4 steps run without speculation; a plain-decode step is forced again once the newest
          baseline is `refresh_every` (~100) steps old. Forced steps do not count toward any trial or set phase.
batching: the paper sizes phases for one request. In a batch the step time is shared, so B requests testing at
          different times would make nearly every step a test step for someone. Test phases therefore start only
          on a batch clock, every `align` = t·M + S0 steps (a set phase runs until the first boundary >= S steps
          on); a new request runs its K_start (0 if that K's recent utility is < 1) until the next boundary.
          align = 1 gives the paper's unaligned single-request schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.policy.base import plan
from service.policy.baseline import BaselineTimes
from service.policy.cascade_search import best_trial, next_trial_k
from service.policy.types import BatchView, Decision, StepStats


@dataclass
class _Request:
    k: int  # draft tokens in the current trial or set phase
    left: int  # steps left in the current trial or set phase
    testing: bool = True  # in a test phase (else a set phase)
    set_len: int = 16  # steps, current S (doubles on back-off)
    trials: list[tuple[int, float]] = field(default_factory=list)  # this test phase's (K, utility)
    tokens: float = 0.0  # tokens emitted in the current trial
    cost: float = 0.0  # Σ t_step / t_base over the current trial
    history: dict[int, float] = field(default_factory=dict)  # K -> latest utility measured at K (K > 0)


class CascadePolicy:
    def __init__(
        self,
        k_max: int = 7,
        k_start: int = 3,
        trial_iters: int = 4,
        max_trials: int = 4,
        set_iters: int = 16,
        max_set_iters: int = 4096,
        baseline_iters: int = 4,
        refresh_every: int = 100,
        converge: float = 0.1,
        align: int | None = None,
    ) -> None:
        if not 1 <= k_start <= k_max or trial_iters < 1 or max_trials < 1 or not 1 <= set_iters <= max_set_iters:
            raise ValueError("cascade: need 1 <= k_start <= k_max, trial/set lengths >= 1, set_iters <= max_set_iters")
        self.k_max, self.k_start = k_max, k_start
        self.trial_iters, self.max_trials, self.converge = trial_iters, max_trials, converge
        self.set_iters, self.max_set_iters = set_iters, max_set_iters
        self.baseline_iters, self.refresh_every = baseline_iters, refresh_every
        self.align = trial_iters * max_trials + set_iters if align is None else align  # steps between test starts
        if self.align < 1:
            raise ValueError(f"cascade: align must be >= 1, got {self.align}")
        self.baseline = BaselineTimes()
        self._requests: dict[str, _Request] = {}
        self._recent: dict[int, float] = {}  # K -> EMA of trial utility at K over all requests
        self._step = 0  # steps observed
        self._clock = 0  # steps observed that were not forced baseline steps (the alignment clock)
        self._forced = False  # the decided step is a forced plain-decode (baseline) step

    def state_of(self, request_id: str) -> _Request | None:
        return self._requests.get(request_id)

    def decide(self, batch: BatchView) -> Decision:
        need_baseline = self.baseline.measured < self.baseline_iters or (
            self._step - self.baseline.last_step >= self.refresh_every
        )
        self._forced = need_baseline
        if need_baseline:
            return plan(batch, [0] * len(batch.requests))
        if len(self._requests) > 2 * len(batch.requests) + 16:
            live = {r.request_id for r in batch.requests}
            self._requests = {rid: s for rid, s in self._requests.items() if rid in live}
        ks = []
        for r in batch.requests:
            state = self._requests.get(r.request_id)
            if state is None:
                state = self._requests[r.request_id] = self._new_request()
            ks.append(state.k)
        return plan(batch, ks)

    def trim(self, batch: BatchView, decision: Decision) -> Decision:
        return decision

    def observe(self, stats: StepStats) -> None:
        if all(r.k == 0 for r in stats.requests) and stats.step_s > 0:
            self.baseline.add(stats.batch_size, stats.step_s, self._step)
        self._step += 1
        if self._forced:
            self._forced = False
            return
        self._clock += 1
        base = self.baseline.get(stats.batch_size)
        if base is None:
            return
        ratio = stats.step_s / base
        for r in stats.requests:
            state = self._requests.get(r.request_id)
            if state is None:
                continue
            if state.testing:
                state.tokens += r.accepted + 1
                state.cost += ratio
            state.left -= 1
            if state.left <= 0:
                self._advance(state)

    def _until_boundary(self, steps: int) -> int:
        """Steps from now until the first test boundary at least `steps` away."""
        return steps + (-(self._clock + steps)) % self.align

    def _new_request(self) -> _Request:
        k0 = _best_k(self._recent, self.k_max) or self.k_start
        wait = self._until_boundary(0)
        if wait == 0:
            return _Request(k=k0, left=self.trial_iters, set_len=self.set_iters)
        k_set = k0 if self._recent.get(k0, 1.0) >= 1.0 else 0
        return _Request(k=k_set, left=wait, testing=False, set_len=self.set_iters)

    def _advance(self, s: _Request) -> None:
        if not s.testing:  # set phase over: start a test phase
            s.testing, s.trials = True, []
            s.k = 1 if s.k == 0 else self._k_start(s)
            s.left, s.tokens, s.cost = self.trial_iters, 0.0, 0.0
            return
        utility = s.tokens / s.cost if s.cost > 0 else 0.0
        s.trials.append((s.k, utility))
        s.history[s.k] = utility
        old = self._recent.get(s.k)
        self._recent[s.k] = utility if old is None else old + 0.2 * (utility - old)
        nxt = next_trial_k(s.trials, self.k_max, self.max_trials, self.converge)
        if nxt is not None:
            s.k, s.left, s.tokens, s.cost = nxt, self.trial_iters, 0.0, 0.0
            return
        best_k, best_u = best_trial(s.trials)
        if best_u < 1.0:
            s.k, s.set_len = 0, min(2 * s.set_len, self.max_set_iters)  # adaptive back-off
        else:
            s.k, s.set_len = best_k, self.set_iters
        s.testing, s.left = False, self._until_boundary(s.set_len)

    def _k_start(self, s: _Request) -> int:
        return _best_k(s.history, self.k_max) or _best_k(self._recent, self.k_max) or self.k_start


def _best_k(utilities: dict[int, float], k_max: int) -> int | None:
    """The non-zero K <= k_max with the highest utility (ties: smaller K), or None without any."""
    good = [(u, -k) for k, u in utilities.items() if 0 < k <= k_max]
    return -max(good)[1] if good else None
