"""`sglang-adaptive`: SGLang 0.5.23's adaptive speculation (srt/speculative/adaptive_spec_params.py), restated.

One draft length for the whole batch, chosen from a tier list that depends on batch size:
  * batch size B selects the tier whose key is the largest key <= B (smallest key if none); tiers keep their own state.
  * after each verify, if the tier's current steps > 0:  ema <- (1 - a) * ema + a * mean_r(accepted_r),  a = 0.2.
  * no change during the first `warmup` = 10 updates, then a re-decision every `interval` = 5 updates:
      - from 0 steps: move up one candidate (a probe; SGLang does not update the EMA while at 0);
      - else step down while  ema <= (prev - 0.5 or 0.5 when prev = 0) + down_hysteresis,
        and only if it did not step down, step up while  ema > cur - 0.5 + up_hysteresis.
  * ema starts at (initial steps - 1); K_r = current steps of the tier for every request.
The optional EMA ceiling (ceiling_coeff) is 0 in every default tier and is not reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.policy.base import plan
from service.policy.types import BatchView, Decision, StepStats


@dataclass(frozen=True)
class Tier:
    candidate_steps: tuple[int, ...]  # draft steps allowed in this batch-size tier, ascending
    up_hysteresis: float = 0.0  # accepted tokens added to the step-up threshold
    down_hysteresis: float = 0.0  # accepted tokens added to the step-down threshold


# SGLang 0.5.23's default config, keyed by the smallest batch size a tier applies to.
DEFAULT_TIERS: dict[int, Tier] = {
    1: Tier((1, 3, 5, 7), up_hysteresis=0.0, down_hysteresis=-0.25),
    8: Tier((0, 1, 3)),
    32: Tier((0, 1)),
    64: Tier((0,)),
}


class _TierState:
    def __init__(self, tier: Tier, initial_steps: int, ema_alpha: float, warmup: int, interval: int) -> None:
        self.tier = tier
        steps = tier.candidate_steps
        self.steps = initial_steps if initial_steps in steps else steps[len(steps) // 2]  # draft tokens
        self.ema = float(self.steps - 1)  # accepted draft tokens per request per step, smoothed
        self.updates = 0  # verify steps seen by this tier
        self.alpha, self.warmup, self.interval = ema_alpha, warmup, interval

    def update(self, accepted: list[int]) -> None:
        if not accepted:
            return
        if self.steps > 0:
            self.ema = (1 - self.alpha) * self.ema + self.alpha * sum(accepted) / len(accepted)
        self.updates += 1
        if self.updates > self.warmup and (self.updates - self.warmup) % self.interval == 0:
            self.steps = self._next_steps()

    def _next_steps(self) -> int:
        steps = self.tier.candidate_steps
        i = steps.index(self.steps)
        if self.steps == 0:
            target = steps[min(i + 1, len(steps) - 1)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)  # a tier born at 0 steps has no history: start neutral
            return target
        start = i
        while i > 0:
            prev = steps[i - 1]
            threshold = (0.5 if prev == 0 else prev - 0.5) + self.tier.down_hysteresis
            if self.ema > threshold:
                break
            i -= 1
        if i == start:
            while i < len(steps) - 1 and self.ema > steps[i] - 0.5 + self.tier.up_hysteresis:
                i += 1
        return steps[i]


class SglangAdaptivePolicy:
    def __init__(
        self,
        initial_steps: int = 3,
        tiers: dict[int, Tier] | None = None,
        ema_alpha: float = 0.2,
        warmup: int = 10,
        interval: int = 5,
    ) -> None:
        tiers = DEFAULT_TIERS if tiers is None else tiers
        if not tiers:
            raise ValueError("sglang-adaptive needs at least one batch-size tier")
        for key, tier in tiers.items():
            if key < 1 or not tier.candidate_steps or any(s < 0 for s in tier.candidate_steps):
                raise ValueError(f"tier {key}: need key >= 1 and non-empty non-negative candidate steps")
            if list(tier.candidate_steps) != sorted(set(tier.candidate_steps)):
                raise ValueError(f"tier {key}: candidate steps must be strictly ascending")
        self._keys = sorted(tiers)
        self._tiers = {key: _TierState(tiers[key], initial_steps, ema_alpha, warmup, interval) for key in self._keys}

    def _tier(self, batch_size: int) -> _TierState:
        chosen = self._keys[0]
        for key in self._keys:
            if key <= batch_size:
                chosen = key
        return self._tiers[chosen]

    def steps_for(self, batch_size: int) -> int:
        """Draft steps the tier for this batch size would use now."""
        return self._tier(batch_size).steps

    def decide(self, batch: BatchView) -> Decision:
        return plan(batch, [self.steps_for(len(batch.requests))] * len(batch.requests))

    def trim(self, batch: BatchView, decision: Decision) -> Decision:
        return decision

    def observe(self, stats: StepStats) -> None:
        self._tier(stats.batch_size).update([r.accepted for r in stats.requests])
