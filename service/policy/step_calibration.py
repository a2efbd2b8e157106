"""Calibration of the step-time model's speculative steps per batch-size bucket (cost_model.py's module docstring)."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable


class Calibration:
    """A batch-size bucket's latest speculative steps, and the median of measured / predicted step time over them
    (`ratio`) and the median absolute deviation of its log (`spread`), recomputed with the coefficients of each
    refit (module docstring). `due`: the bucket has just reached 4, 8 or 16 steps, so a refit would calibrate it:
    refits come every 16 steps, and in the CPU engine's STANDALONE code cell a batch-1 request verified one draft
    for 13 steps at 1.24x the price it was speculating on before the next one.

    The ratio is taken per group of like steps where the group has `min_steps` of them: the same draft depth
    (draft steps) and the same outcome (at least half the drafts accepted, or not), else the same depth, else the
    same outcome, else all (`ratio_for`). The linear model is off by different factors for different steps: on the
    CPU engine (STANDALONE, moe-fine x48, batch 1) static K = 3's 3-draft steps took 70-76 ms where all drafts
    were accepted and 100-127 ms where at most one was, while moe-serve's one- and two-draft steps ran 1.15-1.35x
    their prediction; one ratio over such a mix scales each by the wrong factor. (A policy's model learns only from the
    steps it takes part in: at batch 1 moe-serve's were one- and two-draft steps, so its price of a 3-draft step,
    114-120 ms at p = 0.9, still comes from the fit's extrapolation.) `spread` is the MAD of each step's log ratio
    about its own group's."""

    DUE_AT = frozenset((4, 8, 16))

    def __init__(self, predict: Callable[[tuple], float], window: int = 32, min_steps: int = 4) -> None:
        self._predict = predict  # step -> the uncalibrated model's seconds for it
        # (tokens, requests, draft_steps, draft_tokens, backlog_tokens, accepted drafts, the model's own extras...)
        # and measured seconds
        self._steps: deque[tuple[tuple, float]] = deque(maxlen=window)
        self._min_steps = min_steps
        self._stale = False
        self._ratio, self._spread = 1.0, None
        self._groups: dict[tuple, float] = {(): 0.0}  # group key (`_keys`) -> median log ratio, where min_steps
        self._memo: dict[tuple, float] = {}  # (draft_steps, mostly accepted) -> `ratio_for`'s answer
        self._depth_spread: dict[int, float] = {}  # draft steps > 0 -> `spread` of its steps, where min_steps
        self._added = 0  # steps added in all
        self._measured = False  # the ratios come from min_steps steps or more (else every ratio is 1)
        self.due = False

    def add(self, step: tuple, measured_s: float) -> None:
        if measured_s > 0:
            self._steps.append((step, measured_s))
            self._added += 1
            self.due = self.due or self._added in self.DUE_AT

    def refit(self) -> None:
        self._stale, self.due = bool(self._steps), False

    @property
    def measured(self) -> bool:
        """Whether `min_steps` steps were measured at the last refit (until then every ratio is 1)."""
        self._update()
        return self._measured

    @property
    def ratio(self) -> float:
        """Measured / predicted, median over all steps; 1 until `min_steps` steps were measured."""
        self._update()
        return self._ratio

    def ratio_for(self, draft_steps: int | None, accepted_share: float | None) -> float:
        """Measured / predicted of the most alike group with `min_steps` steps (class docstring): `draft_steps` of
        the step priced (None: not known), `accepted_share` the share of its drafts expected accepted (None: not
        known)."""
        self._update()
        memo_key = (draft_steps, None if accepted_share is None else accepted_share >= 0.5)
        found = self._memo.get(memo_key)
        if found is None:  # priced for every configuration tried: looked up once per refit
            centre = next(self._groups[k] for k in _keys(draft_steps, accepted_share) if k in self._groups)
            found = self._memo[memo_key] = math.exp(centre)
        return found

    @property
    def spread(self) -> float | None:
        """MAD of log(measured / predicted); None until `min_steps` steps were measured."""
        self._update()
        return self._spread

    def spread_for(self, draft_steps: int | None) -> float | None:
        """The spread over the steps of this draft depth; None where fewer than `min_steps` were measured while
        another depth has them. `spread` where the depth is not known (None) or no depth has them (as with a
        drafter whose work does not follow K, NGRAM's lookup: its steps have no draft steps)."""
        self._update()
        if not draft_steps or not self._depth_spread:
            return self._spread
        return self._depth_spread.get(draft_steps)

    def _update(self) -> None:
        if not self._stale:
            return
        self._stale, self._memo = False, {}
        rows = [(step, math.log(m / t)) for step, m in self._steps if (t := self._predict(step)) > 0]
        self._measured = len(rows) >= self._min_steps
        if not self._measured:
            return
        by_key: dict[tuple, list[float]] = {}
        for step, x in rows:
            for key in _step_keys(step):
                by_key.setdefault(key, []).append(x)
        self._groups = {k: statistics.median(xs) for k, xs in by_key.items() if len(xs) >= self._min_steps}
        self._ratio = math.exp(self._groups[()])
        own = [abs(x - self._own_centre(step)) for step, x in rows]
        self._spread = statistics.median(own)
        by_depth: dict[int, list[float]] = {}
        for (step, _), x in zip(rows, own, strict=True):
            if step[2] > 0:
                by_depth.setdefault(step[2], []).append(x)
        self._depth_spread = {d: statistics.median(xs) for d, xs in by_depth.items() if len(xs) >= self._min_steps}

    def _own_centre(self, step: tuple) -> float:
        """The median log ratio of the most alike group with min_steps steps that holds `step`."""
        return next(self._groups[k] for k in _step_keys(step) if k in self._groups)


def _keys(draft_steps: int | None, accepted_share: float | None) -> list[tuple]:
    """Group keys from the most alike to all steps (Calibration's docstring)."""
    mostly = None if accepted_share is None else accepted_share >= 0.5
    keys: list[tuple] = []
    if draft_steps is not None and mostly is not None:
        keys.append(("depth-outcome", draft_steps, mostly))
    if draft_steps is not None:
        keys.append(("depth", draft_steps))
    if mostly is not None:
        keys.append(("outcome", mostly))
    return [*keys, ()]


def _step_keys(step: tuple) -> list[tuple]:
    """`_keys` of a measured step: (tokens, requests, draft_steps, draft_tokens, backlog_tokens, accepted, ...)."""
    tokens, requests, draft_steps, _, _, accepted = step[:6]
    drafts = tokens - requests
    share = None if accepted is None or drafts <= 0 else accepted / drafts
    return _keys(draft_steps, share)
