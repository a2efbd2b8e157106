"""One speculative decode step as moe-serve runs it: plan (policies) → draft → verify (trees cut at K_i, expert
budget) → stats back to the policies and metrics. The SGLang hooks that call into this live in spec_hooks.py.

Timings are host `time.perf_counter()` around SGLang's own phases: draft = the drafter (NGRAM's trie lookup and tree
build; STANDALONE's draft forwards and draft-extend), verify = the target's verify forward, other = the rest of the
step (acceptance, KV bookkeeping, planning). On CPU these are compute times; on GPU they are launch times unless the
phase itself syncs (we add no sync).

Policies get `decide()` once per step and `observe()` after it; `trim()` is not called yet: NGRAM has no per-draft
confidences and the STANDALONE drafter's scores are not read out, so verify_len = K as decided.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace

import torch

from moe_sglang.expert_budget import VerifyExperts
from moe_sglang.hints import NO_POLICY, RequestHints, parse_hints
from moe_sglang.metrics import SpecMetrics
from moe_sglang.policies import PolicySet, StepPlan, policy_params_from_env
from moe_sglang.request_stats import RequestStatsBook
from service.policy import RequestStepStats, RequestView, StepStats

logger = logging.getLogger(__name__)

RECENT_STEPS = 8  # verify steps of accept history shown to policies per request


@dataclass
class StepState:
    rids: tuple[str, ...]  # request ids in batch order
    hints: tuple[RequestHints, ...]  # per request
    plan: StepPlan  # the policies' decision
    max_k: int  # draft depth the drafter produced this step
    verify_width: int  # tokens per request in the verify forward (draft tree nodes; fewer once narrowed)
    context_tokens: int  # tokens in the batch's KV caches at step start
    started: float  # seconds, perf_counter at step start
    draft_s: float = 0.0  # seconds in draft phases
    verify_s: float = 0.0  # seconds in the target verify forward
    accept_lens: torch.Tensor | None = None  # [bs] accepted drafts + 1, from verification
    unique_experts: tuple[int, ...] = ()  # [num_layers] experts touched by the verify forward
    dropped_experts: int = 0  # experts the budget kept out, over all layers
    narrowed_from: int = 0  # the worker's own verify width when this step was narrowed (spec_hooks); 0 = not
    verified_ks: tuple[int, ...] | None = None  # [bs] min(K_i, draft depth): drafts request i could accept; None = K_i
    pending: tuple | None = None  # (views, layout) of a plan deferred until the draft exists
    node_depths: list[list[int]] | None = None  # [bs][n] depth of every draft node, once the prepare hook read them


@dataclass
class SpecRuntime:
    """Per scheduler process: the policies, the step in flight, accept history, metrics."""

    budget_mode: str = "truncation"  # expert_budget.BUDGET_MODES
    narrow: bool = True  # narrow NGRAM verify forwards to the drafts the chosen K can use (spec_hooks)
    no_hint_policy: str = NO_POLICY  # policy of requests that carry no moe_serve hints
    policies: PolicySet | None = None  # built at the first step (needs the model shape)
    metrics: SpecMetrics | None = None
    request_stats: RequestStatsBook = field(default_factory=RequestStatsBook)  # per-request counts for responses
    step: StepState | None = None  # the step in flight
    verify: VerifyExperts | None = None  # set during the verify forward only
    draft_depth: int = 0  # nesting of draft phases (the draft model's forwards are not verify)
    history: dict[str, deque] = field(default_factory=dict)  # rid -> recent accepted counts
    steps: int = 0  # steps recorded in this process
    last: StepStats | None = None  # the latest step's stats (tests, debugging)

    def begin(
        self, batch, target_worker, max_k: int, verify_width: int, layout: str = "fixed", after_draft: bool = False
    ) -> StepState:
        """Start a step; with `after_draft` the policies are asked once the draft exists (`plan_after_draft`)."""
        if self.policies is None:
            self.policies = PolicySet(model_shape(target_worker), policy_params_from_env())
            self.metrics = SpecMetrics.if_enabled()
        now = time.perf_counter()
        hints = tuple(self._hints(req) for req in batch.reqs)
        views = [
            RequestView(
                request_id=req.rid,
                tenant=h.tenant,
                slo=h.slo,
                tokens_so_far=len(req.output_ids),
                context_len=len(req.origin_input_ids) + len(req.output_ids),
                recent_accepts=tuple(self.history.get(req.rid, ())),
            )
            for req, h in zip(batch.reqs, hints, strict=True)
        ]
        plan = _unplanned(len(views), max_k) if after_draft else self._plan(now, views, hints, max_k, layout)
        context = sum(v.context_len for v in views)
        self.step = StepState(tuple(v.request_id for v in views), hints, plan, max_k, verify_width, context, now)
        if after_draft:
            self.step.pending = (views, layout)
        return self.step

    def plan_after_draft(self, state: StepState, depths: list[int]) -> StepPlan:
        """The deferred plan of `state`, with each request's draft depth in its view."""
        views, layout = state.pending
        state.pending = None
        views = [replace(v, draft_depth=d) for v, d in zip(views, depths, strict=True)]
        state.plan = self._plan(time.perf_counter(), views, state.hints, state.max_k, layout)
        return state.plan

    def _plan(self, now: float, views: list[RequestView], hints, max_k: int, layout: str) -> StepPlan:
        try:
            return self.policies.plan(now, views, list(hints), max_k, layout)
        except Exception:  # a policy bug must not take the scheduler down: this step runs as SGLang would
            logger.exception("speculation policies failed; verifying the full draft for this step")
            return _unplanned(len(views), max_k)

    def _hints(self, req) -> RequestHints:
        try:
            return parse_hints(req.sampling_params.custom_params, self.no_hint_policy)
        except ValueError as err:  # a client's malformed hint: warn, never fail the batch from the scheduler
            logger.warning("request %s: ignoring moe_serve hints (%s)", req.rid, err)
            return parse_hints(None, self.no_hint_policy)

    def end(self, state: StepState, result) -> StepStats:
        self.step = None
        accept_lens = state.accept_lens if state.accept_lens is not None else result.accept_lens
        accepted = [max(int(a) - 1, 0) for a in accept_lens.tolist()]
        now = time.perf_counter()
        # what was verified: a position the drafter left empty is neither accepted nor rejected, so policies learn
        # P(accept | a draft was there), not how often the drafter finds one
        verified = state.verified_ks or state.plan.ks
        requests = tuple(
            RequestStepStats(rid, k, min(a, k)) for rid, k, a in zip(state.rids, verified, accepted, strict=True)
        )
        stats = StepStats(
            now=now,
            batch_size=len(requests),
            requests=requests,
            draft_s=state.draft_s,
            verify_s=state.verify_s,
            other_s=max(now - state.started - state.draft_s - state.verify_s, 0.0),
            unique_experts=state.unique_experts,
            context_tokens=state.context_tokens,
            draft_steps=0,  # the drafter runs the same whatever K is chosen: a fixed cost of the step
            verify_width=state.verify_width,
        )
        for name in dict.fromkeys(state.plan.policies):
            # every policy sees the whole step: its cost model fits step time against the whole batch's work
            self.policies.observe(name, stats)
        self._remember(requests)
        self.request_stats.record_step(
            state.rids, state.plan.policies, state.plan.ks, verified, [r.accepted for r in requests]
        )
        if self.metrics is not None:
            tenants = [h.tenant for h in state.hints]
            self.metrics.record(list(state.plan.policies), tenants, stats, state.dropped_experts, state.plan.ks)
        self.steps += 1
        self.last = stats
        return stats

    def _remember(self, requests: tuple[RequestStepStats, ...]) -> None:
        for r in requests:
            if r.k > 0:
                self.history.setdefault(r.request_id, deque(maxlen=RECENT_STEPS)).append(r.accepted)
        if len(self.history) > 2 * len(requests) + 64:
            live = {r.request_id for r in requests}
            self.history = {rid: h for rid, h in self.history.items() if rid in live}


def _unplanned(size: int, max_k: int) -> StepPlan:
    """SGLang's own behaviour: no policy, every request may accept the whole draft."""
    return StepPlan(tuple(NO_POLICY for _ in range(size)), tuple(max_k for _ in range(size)), None)


def model_shape(target_worker) -> dict[str, int]:
    """num_experts, top_k, num_layers of the target model, under the names the policies take."""
    config = target_worker.model_config.hf_config
    config = getattr(config, "text_config", None) or config
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) or 1
    top_k = getattr(config, "num_experts_per_tok", None) or 1
    return {"num_experts": int(experts), "top_k": int(top_k), "num_layers": int(config.num_hidden_layers)}
