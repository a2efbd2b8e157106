"""StepTimeModel's prices for one batch size and expert budget (cost_model.py's module docstring has the model).

An allocation prices ~85 configurations of one batch (moe_serve_allocate.py: every draft depth, each eliminated a
draft at a time), and each price looked up again what does not change between them: the bucket's expert reuse, its
calibrations, its other time, the plain floor. On the CPU engine's STANDALONE batch-8 waves (moe-fine x48, Zen 5)
the eight allocations `rejudging_could_pay` asks at steps 3, 7 and 15 took 3.2-5.5 ms of each of those steps
(bench/results/zen5-b8-s72). A `StepPricer` looks them up once; StepTimeModel's own prices go through it, so there is
one formula. Built per use and never kept: a measured step changes what it looked up (`StepTimeModel.add`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.policy.expert_routing import batch_bucket
from service.policy.moesd import expected_experts

if TYPE_CHECKING:
    from service.policy.cost_model import StepTimeModel
    from service.policy.step_calibration import Calibration


class StepPricer:
    """Prices of steps of `requests` requests under expert budget `budget` (None: every expert)."""

    __slots__ = (
        "_model",
        "requests",
        "_budget",
        "_coef",
        "_fresh",
        "_split",
        "_other",
        "_bucket",
        "_scout",
        "_calibration",
        "_own_ratio",
        "_plain_ratio",
        "_speculative_ratio",
        "_layers",
        "_experts",
        "_top_k",
        "_floor",
    )

    def __init__(self, model: StepTimeModel, requests: int, budget: int | None) -> None:
        self._model, self.requests, self._budget, self._coef = model, requests, budget, model.coef
        routing = model.routing(requests)
        self._fresh = 1.0 - routing.affinity  # fresh routings per draft under the single affinity
        split = routing.split.fresh_per_draft()
        if split is None and model._hope:
            split = (0.0, 1.0 - routing.affinity)
        if model._fresh_accepted is not None:
            split = (model._fresh_accepted, 1.0 - routing.affinity if split is None else split[1])
        self._split = split
        self._other = (model.other_time(False, requests), model.other_time(True, requests))
        self._bucket, self._scout, self._own_ratio = batch_bucket(requests), model._scout, model._own_ratio
        # the bucket's calibrations, looked up at their first use (`scale`): a raw price, which the calibrations
        # themselves ask for their measured steps, never touches them
        self._calibration: Calibration | None | bool = False  # False: not looked up yet
        self._plain_ratio: float | None = None
        self._speculative_ratio = 1.0  # an uncalibrated bucket's speculative steps' (`scale`)
        shape = model.shape
        self._layers, self._experts, self._top_k = shape.num_layers, shape.num_experts, shape.top_k
        self._floor: tuple[float, float] | None = None  # `floor`, looked up at its first use (it prices with a pricer)

    def experts(self, tokens: float, accepted: float | None = None) -> float:
        """Predicted Σ over layers of distinct experts of a verify of `tokens` tokens in all (StepTimeModel.experts)."""
        requests = self.requests
        drafts = max(tokens - requests, 0)
        fresh = requests + drafts * self._fresh
        split = self._split
        if accepted is not None and split is not None:
            good = min(max(accepted, 0.0), drafts)
            fresh = requests + good * split[0] + (drafts - good) * split[1]
        per_layer = expected_experts(fresh, self._experts, self._top_k)
        if self._budget is not None:
            per_layer = min(per_layer, float(self._budget))
        return self._layers * per_layer

    def raw_verify(self, tokens: int, accepted: float | None = None) -> float:
        """The target forward by the fit alone (not calibrated)."""
        c = self._coef
        extra = 0.0 if tokens <= self.requests else c.verify_extra * self.requests
        return c.verify_fixed + extra + c.per_token * tokens + c.per_expert * self.experts(tokens, accepted)

    def raw_step(
        self, tokens: int, draft_steps: int, draft_tokens: int, backlog_tokens: float, accepted: float | None
    ) -> float:
        """The whole step by the fit alone: drafting, the target forward and the rest (`other_time`)."""
        c = self._coef
        draft = c.per_draft_step * draft_steps + c.per_draft_token * draft_tokens
        if draft_steps:
            draft += c.per_backlog_token * backlog_tokens
        plain = tokens <= self.requests
        return self.raw_verify(tokens, accepted) + draft + self._other[plain]

    def scale(self, tokens: int, draft_steps: int | None, accepted: float | None) -> float:
        """Measured / predicted for a speculative step of this batch size, draft depth and expected outcome
        (Calibration.ratio_for), a plain step by its bucket's plain steps' ratio; 1 for an unmeasured bucket. A
        bucket whose speculative steps are not calibrated yet prices them by its plain steps' ratio where above 1,
        else by the fit (cost_model.py's module docstring, calibration)."""
        requests = self.requests
        if tokens <= requests:
            return self._plain()
        if self._calibration is False:
            found = self._model._calibration.get(self._bucket)
            self._calibration = found if found is not None and found.measured else None
            if self._calibration is None:  # by the plain steps' ratio where above 1, else by the fit
                plain = self._plain()
                self._speculative_ratio = (plain if self._scout else max(plain, 1.0)) * self._own_ratio
        if self._calibration is None:
            return self._speculative_ratio
        share = None if accepted is None else accepted / (tokens - requests)
        return self._calibration.ratio_for(draft_steps, share) * self._own_ratio

    def _plain(self) -> float:
        """The bucket's plain steps' measured / predicted, 1 where none was measured."""
        if self._plain_ratio is None:
            found = self._model._plain_calibration.get(self._bucket)
            self._plain_ratio = 1.0 if found is None else found.ratio
        return self._plain_ratio

    def verify(self, tokens: int, accepted: float | None = None) -> float:
        """StepTimeModel.verify_time."""
        price = self.raw_verify(tokens, accepted) * self.scale(tokens, None, accepted)
        if tokens <= self.requests:
            return price
        return max(price, self.floor()[0])

    def step(
        self,
        tokens: int,
        draft_steps: int,
        draft_tokens: int,
        backlog_tokens: float = 0,
        accepted: float | None = None,
    ) -> float:
        """StepTimeModel.step_time."""
        raw = self.raw_step(tokens, draft_steps, draft_tokens, backlog_tokens, accepted)
        price = raw * self.scale(tokens, draft_steps, accepted)
        if tokens <= self.requests:
            return price
        return max(price, self.floor()[1])

    def floor(self) -> tuple[float, float]:
        """The (target forward, step) of a plain decode: no speculative step is priced under it
        (StepTimeModel._plain_price)."""
        if self._floor is None:
            self._floor = self._model._plain_price(self.requests, self._budget)
        return self._floor
