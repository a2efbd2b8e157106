"""The speculation policies of one engine process: built once per name, asked once per step for their requests.

Each decode step the batch's requests are grouped by the policy their hints name; each policy's `decide()` gets a
BatchView of its own requests (a policy never sees another policy's requests) and its K per request, capped by the
request's `max_k` hint. Policy parameters come from the engine settings (settings.py), {name: {param: value}};
the model shape (num_experts, top_k, num_layers) is filled in for policies whose constructor takes it.
Requests labelled NO_POLICY keep SGLang's behaviour (K = max_k, no policy asked).
An unknown policy name in a hint falls back to the default policy (logged once per name): a request is never failed
from inside the scheduler for a hint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from moe_sglang.hints import DEFAULT_POLICY, NO_POLICY, RequestHints
from service.policy import BatchView, Decision, RequestView, SpeculationPolicy, available_policies, make_policy

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepPlan:
    """What the policies decided for one step, in batch order."""

    policies: tuple[str, ...]  # policy name per request
    ks: tuple[int, ...]  # draft tokens request i may have accepted (0 = plain decode)
    expert_budget: tuple[int, ...] | None  # [num_layers] experts per MoE layer in verify; None = no budget
    # per request: judge its drafter without a verify this step (Decision.judge); () = nobody
    judge: tuple[bool, ...] = ()
    # per request: K = 0 with nothing drafted, judged or asked until it has emitted this many tokens (0: not resting;
    # Decision.rest_until); () = nobody
    rest_until: tuple[int, ...] = ()
    # per request: its drafter's stop at a low margin (Decision.draft_stop; 0: none); () = nobody
    draft_stop: tuple[float, ...] = ()
    # per request: its drafter's stop at a low predicted acceptance (Decision.accept_stop; 0: none); () = nobody
    accept_stop: tuple[float, ...] = ()


class PolicySet:
    def __init__(self, model_shape: dict[str, int], params: dict[str, dict[str, object]] | None = None) -> None:
        self._shape = model_shape  # num_experts, top_k, num_layers of the target model
        self._params = params or {}
        self._policies: dict[str, SpeculationPolicy] = {}
        self._unknown: set[str] = set()
        self.builds = 0  # policies constructed in this process (once per name)

    def resolve(self, name: str) -> str:
        if name == NO_POLICY or name in available_policies():
            return name
        if name not in self._unknown:
            self._unknown.add(name)
            logger.warning("unknown speculation policy %r in a request hint; using %r", name, DEFAULT_POLICY)
        return DEFAULT_POLICY

    def get(self, name: str) -> SpeculationPolicy:
        if name not in self._policies:
            params = dict(self._params.get(name, {}))
            try:  # policies that model MoE cost take the model shape; the others reject it
                policy = make_policy(name, **{**self._shape, **params})
            except ValueError:
                policy = make_policy(name, **params)
            self._policies[name] = policy
            self.builds += 1
        return self._policies[name]

    def plan(
        self,
        now: float,
        views: list[RequestView],
        hints: list[RequestHints],
        max_k: int,
        layout: str = "fixed",
        judging: bool = False,
        plain_burst: int = 1,
        judge_beside: bool = False,
        gated: bool = False,
    ) -> StepPlan:
        """`layout`: how this step's verify forward will be laid out (service.policy.types.VERIFY_LAYOUTS);
        `judging`: the engine can judge a request's drafter without a verify (BatchView.judging); `plain_burst`:
        BatchView.plain_burst; `judge_beside`: BatchView.judge_beside; `gated`: BatchView.gated."""
        names = [self.resolve(h.policy) for h in hints]
        ks = [max_k] * len(views)
        judge = [False] * len(views)
        rest = [0] * len(views)
        stop = [0.0] * len(views)
        accept_stop = [0.0] * len(views)
        budgets: list[tuple[int, ...] | None] = []
        for name in dict.fromkeys(n for n in names if n != NO_POLICY):
            rows = [i for i, n in enumerate(names) if n == name]
            view = BatchView(
                now,
                tuple(views[i] for i in rows),
                max_k,
                verify_layout=layout,
                judging=judging,
                plain_burst=plain_burst,
                judge_beside=judging and judge_beside,
                gated=gated,
            )
            decision: Decision = self.get(name).decide(view)
            for j, (i, d) in enumerate(zip(rows, decision.requests, strict=True)):
                ks[i] = min(d.verify_len, max_k)
                judge[i] = judging and d.request_id in decision.judge
                rest[i] = decision.rest_until[j] if decision.rest_until else 0
                stop[i] = decision.draft_stop
                accept_stop[i] = decision.accept_stop
            budgets.append(decision.expert_budget)
        for i, h in enumerate(hints):
            if h.max_k is not None:
                ks[i] = min(ks[i], h.max_k)
            judge[i] = judge[i] and ks[i] == 0 and h.max_k != 0  # a hint that forbids drafting forbids judging
        return StepPlan(
            tuple(names),
            tuple(ks),
            self._step_budget(budgets, hints),
            tuple(judge) if any(judge) else (),
            tuple(rest) if any(rest) else (),
            tuple(stop) if any(stop) else (),
            tuple(accept_stop) if any(accept_stop) else (),
        )

    def _step_budget(self, budgets: list[tuple[int, ...] | None], hints: list[RequestHints]) -> tuple[int, ...] | None:
        """One verify forward serves the whole batch, so a lossy budget needs every request's permission; the
        tightest budget asked for (by a policy or a hint) wins."""
        if not hints or not all(h.allow_lossy_budget for h in hints):
            return None
        layers = self._shape.get("num_layers", 0)
        caps = [b for b in budgets if b is not None]
        caps += [(h.expert_budget,) * layers for h in hints if h.expert_budget is not None]
        if not caps:
            return None
        return tuple(min(per_layer) for per_layer in zip(*caps, strict=True))

    def observe(self, name: str, stats) -> None:
        if name != NO_POLICY:
            self.get(name).observe(stats)
