"""What moe-serve adds around one speculative decode step, whatever the drafter: the requests' hints, the policies'
plan (K_i per request, the expert budget), and the step's stats back to the policies and the metrics.

The workers (ngram_worker.py, standalone_worker.py) drive the step and call, in order:
    open(batch, max_k, backlogs)           the in-flight step: hints and views of the batch's requests
    plan(step, draft_depths)               the policies' K_i (NGRAM plans once its draft exists: depths known)
    close(step, verified, accepted, shadow) StepStats -> policies' observe(), metrics, request history
Three nouns, three types: `StepInFlight` (our bookkeeping while the step runs), `StepPlan` (the policies' decision,
policies.py) and `StepStats` (what the step measured, service/policy/types.py).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace

from moe_sglang.hints import NO_POLICY, RequestHints, parse_hints
from moe_sglang.metrics import SpecMetrics
from moe_sglang.policies import PolicySet, StepPlan
from moe_sglang.request_stats import RequestStatsBook
from moe_sglang.settings import EngineSettings
from moe_sglang.step_log import StepLog
from service.policy import RequestStepStats, RequestView, ShadowOutcome, StepStats

logger = logging.getLogger(__name__)

RECENT_STEPS = 8  # verify steps of accept history shown to policies per request


@dataclass
class StepInFlight:
    rids: tuple[str, ...]  # request ids in batch order
    hints: tuple[RequestHints, ...]  # per request
    views: tuple[RequestView, ...]  # per request, as the policies see it; () where no request may draft (open)
    max_k: int  # drafts per request the drafter can produce this step
    context_tokens: int  # tokens in the batch's KV caches at step start
    started: float  # seconds, perf_counter at step start
    plan: StepPlan | None = None  # the policies' decision, once asked
    draft_s: float = 0.0  # seconds drafting
    verify_s: float = 0.0  # seconds in the target forward (verify, or plain decode)
    draft_steps: int = 0  # sequential draft forwards that depended on K (STANDALONE); 0 for NGRAM's fixed lookup
    draft_backlog_tokens: int = 0  # tokens the draft model ran to catch up (STANDALONE's lazy draft cache)
    judge_s: float = 0.0  # seconds of the draft forward judging requests at K = 0 (STANDALONE; not in draft_s)
    judge_tokens: int = 0  # tokens that forward ran besides the judged roots (their catch-up)
    judge_beside_s: float = 0.0  # seconds that forward ran on the draft thread, beside the step (draft_thread.py)
    verify_width: int = 0  # tokens per request of a rectangular / fixed verify layout; 0 = ragged (k_i + 1 each)
    plain: bool = False  # the target ran a plain decode (nobody verified a draft)
    unique_experts: tuple[int, ...] = ()  # [num_layers] experts the target forward computed
    dropped_experts: int = 0  # experts the budget kept out, over all layers
    expert_reuse: tuple[float | None, ...] = ()  # per request, RequestStepStats.expert_reuse; () = none measured
    resting: tuple[bool, ...] = ()  # per request: it rests this step (SpecRuntime.resting); () = nobody
    ended: float | None = None  # perf_counter where the step ended, if before its close (a burst's forwards)
    draft_depths: tuple[int, ...] = ()  # per request, drafts in hand when the policies were asked (NGRAM); () = none

    def following(self, started: float, resting: tuple[bool, ...] | None = None) -> StepInFlight:
        """The next forward of a plain burst (plain_burst.py) as a step of its own: the same requests, hints and plan
        (K = 0 for all), one more token of context per request, its own time and measurements; `resting`: who rests
        in it, where this step's plan started rests (default: as in this step)."""
        return StepInFlight(
            self.rids,
            self.hints,
            self.views,
            self.max_k,
            self.context_tokens + len(self.rids),
            started,
            plan=self.plan,
            resting=self.resting if resting is None else resting,
        )

    def ceilings(self) -> list[int]:
        """The most drafts each request may get before any policy is asked (its hint's max_k, the drafter's depth)."""
        return [self.max_k if h.max_k is None else min(h.max_k, self.max_k) for h in self.hints]


@dataclass
class ForwardCounts:
    """What a worker ran for decode steps, counted where it runs (tests read these; the metrics mirror them)."""

    draft_phases: int = 0  # steps that ran the drafter
    verify_forwards: int = 0  # target verify forwards
    verify_tokens: int = 0  # their input rows
    decode_forwards: int = 0  # plain decode forwards (steps where nobody speculated)
    decode_tokens: int = 0  # their input rows


@dataclass
class SpecRuntime:
    """Per worker (one per scheduler process): the policies, accept history, metrics."""

    settings: EngineSettings
    model_shape: dict[str, int]  # num_experts, top_k, num_layers of the target model
    request_stats: RequestStatsBook = field(default_factory=RequestStatsBook)  # per request, for its response
    policies: PolicySet = field(init=False)
    metrics: SpecMetrics | None = field(init=False)
    history: dict[str, deque] = field(default_factory=dict)  # rid -> recent accepted counts
    # (rid, id of its sampling parameters) -> its parsed hints; the id keeps a client's reused rid from matching
    hints: dict[tuple[str, int], RequestHints] = field(default_factory=dict)
    counts: ForwardCounts = field(default_factory=ForwardCounts)
    steps: int = 0  # steps closed in this process
    last: StepStats | None = None  # the latest step's stats (tests, debugging)
    # rid -> the experts its latest token routed to ([num_layers][top_k] ids), where a plain decode step produced it,
    # and the step count that step closed at (verify.plain_step)
    last_routing: dict = field(default_factory=dict)
    last_routing_step: int = -1
    # rid -> the output length at which its rest ends (StepPlan.rest_until): until then it steps as if its hints
    # capped K at 0, so it is not shown to a policy as a request that may draft; a draft in hand for free (NGRAM) is
    # still judged (shadow.py), and a draft accepted to its end ends the rest (close)
    resting: dict[str, int] = field(default_factory=dict)
    step_log: StepLog | None = field(init=False)  # settings.step_log's file, if set

    def __post_init__(self) -> None:
        self.policies = PolicySet(self.model_shape, self.settings.policy_params)
        self.step_log = StepLog(self.settings.step_log) if self.settings.step_log else None
        self.metrics = SpecMetrics.if_enabled()
        if self.metrics is not None:  # a response leaves after the metrics of its steps are written
            self.request_stats.on_finish.append(self.metrics.flush)

    def open(self, reqs, max_k: int, backlogs: list[int] | None = None) -> StepInFlight:
        """`backlogs[i]`: tokens the drafter must catch up on before drafting for request i (None: none).
        A batch in which no request may draft (every hint caps K at 0, or the drafter has no depth) gets no views:
        no policy is asked about it (plan), so none is built."""
        hints = tuple(self._hints(req) for req in reqs)
        resting = self._rested(reqs) if self.resting else ()
        if resting:
            hints = tuple(replace(h, max_k=0) if rests else h for h, rests in zip(hints, resting, strict=True))
        if max_k == 0 or all(h.max_k == 0 for h in hints):
            context = sum(len(req.origin_input_ids) + len(req.output_ids) for req in reqs)
            rids = tuple(req.rid for req in reqs)
            return StepInFlight(rids, hints, (), max_k, context, time.perf_counter(), resting=resting)
        backlogs = backlogs or [0] * len(reqs)
        views = tuple(
            RequestView(
                request_id=req.rid,
                tenant=h.tenant,
                slo=h.slo,
                tokens_so_far=len(req.output_ids),
                context_len=len(req.origin_input_ids) + len(req.output_ids),
                recent_accepts=tuple(self.history.get(req.rid, ())),
                draft_backlog=backlog,
                tokens_left=_tokens_left(req),
            )
            for req, h, backlog in zip(reqs, hints, backlogs, strict=True)
        )
        context = sum(v.context_len for v in views)
        rids = tuple(v.request_id for v in views)
        return StepInFlight(rids, hints, views, max_k, context, time.perf_counter(), resting=resting)

    def plan(
        self,
        step: StepInFlight,
        draft_depths: list[int] | None = None,
        judging: bool = False,
        beside: bool = False,
        gated: bool = False,
    ) -> StepPlan:
        """Ask the policies; with `draft_depths` each request's view says how deep its draft already is; `judging`:
        the worker can judge a request's drafter without a verify (BatchView.judging), `beside`: on a core of its own
        (BatchView.judge_beside); `gated`: its chains stop where an acceptance head doubts a draft (BatchView.gated)."""
        if not step.views:  # nobody may draft (open): K = 0 for all, a plain decode; nothing to ask a policy
            step.plan = StepPlan(
                tuple(self.policies.resolve(h.policy) for h in step.hints), (0,) * len(step.rids), None
            )
            return step.plan
        views = list(step.views)
        if draft_depths is not None:
            views = [replace(v, draft_depth=d) for v, d in zip(views, draft_depths, strict=True)]
            step.draft_depths = tuple(draft_depths)
        try:
            burst = min(self.settings.plain_burst, step.max_k + 1)  # plain_burst.burst_len's bound, rows of K + 1
            step.plan = self.policies.plan(
                time.perf_counter(), views, list(step.hints), step.max_k, "ragged", judging, burst, beside, gated
            )
        except Exception:  # a policy bug must not take the scheduler down: this step runs as SGLang would
            logger.exception("speculation policies failed; verifying the full draft for this step")
            step.plan = StepPlan(tuple(NO_POLICY for _ in views), tuple(step.ceilings()), None)
        for rid, until in zip(step.rids, step.plan.rest_until, strict=False):
            if until:
                self.resting[rid] = until
        return step.plan

    def close(
        self, step: StepInFlight, verified: list[int], accepted: list[int], shadow: tuple[ShadowOutcome, ...] = ()
    ) -> StepStats:
        """`verified[i]`: drafts request i verified (min(K_i, D_i)); `accepted[i]`: drafts it accepted; `shadow`:
        unverified drafts judged this step (shadow.py)."""
        now = time.perf_counter() if step.ended is None else step.ended
        reuse = step.expert_reuse or (None,) * len(step.rids)
        requests = tuple(
            RequestStepStats(rid, k, min(a, k), r)
            for rid, k, a, r in zip(step.rids, verified, accepted, reuse, strict=True)
        )
        stats = StepStats(
            now=now,
            batch_size=len(requests),
            requests=requests,
            draft_s=step.draft_s,
            verify_s=step.verify_s,
            other_s=max(now - step.started - step.draft_s - step.verify_s - step.judge_s, 0.0),
            unique_experts=step.unique_experts,
            context_tokens=step.context_tokens,
            draft_steps=step.draft_steps,
            draft_backlog_tokens=step.draft_backlog_tokens,
            judge_s=step.judge_s,
            judge_tokens=step.judge_tokens,
            verify_width=step.verify_width,
            plain=step.plain,
            shadow=shadow,
        )
        plan = step.plan
        for name in dict.fromkeys(plan.policies):
            # every policy sees the whole step: its cost model fits step time against the whole batch's work
            self.policies.observe(name, stats)
        for judged in shadow:  # a draft accepted to its end ends a rest (Decision.rest_until), as in the policies
            if judged.whole:
                self.resting.pop(judged.request_id, None)
        self._remember(requests)
        self.request_stats.record_step(
            step.rids,
            plan.policies,
            plan.ks,
            verified,
            [r.accepted for r in requests],
            [r.expert_reuse for r in requests],
            step.resting,
        )
        if shadow:
            self.request_stats.record_shadow(shadow)
        if self.metrics is not None:
            tenants = [h.tenant for h in step.hints]
            self.metrics.record(list(plan.policies), tenants, stats, step.dropped_experts, plan.ks)
        if self.step_log is not None:
            self.step_log.write(step, stats, plan, verified, [r.accepted for r in requests])
        self.steps += 1
        self.last = stats
        return stats

    def count_draft(self) -> None:
        self.counts.draft_phases += 1
        if self.metrics is not None:
            self.metrics.count_draft()

    def count_forward(self, kind: str, tokens: int) -> None:
        """A target forward of a decode step: "verify" or "decode" (plain), `tokens` = its input rows."""
        if kind == "verify":
            self.counts.verify_forwards += 1
            self.counts.verify_tokens += tokens
        else:
            self.counts.decode_forwards += 1
            self.counts.decode_tokens += tokens
        if self.metrics is not None:
            self.metrics.count_forward(kind, tokens)

    def may_draft(self, req) -> bool:
        """Whether the request's hints let it draft at all (a max_k of 0 keeps it plain for its whole life)."""
        return self._hints(req).max_k != 0

    def _hints(self, req) -> RequestHints:
        """The request's hints, parsed once, at its prefill or first decode step (its sampling parameters never
        change)."""
        key = (req.rid, id(req.sampling_params))
        hints = self.hints.get(key)
        if hints is None:
            if len(self.hints) > 1024:  # requests that left: parsed again if they ever come back
                self.hints.clear()
            try:
                hints = parse_hints(req.sampling_params.custom_params, self.settings.default_policy)
            except ValueError as err:  # a client's malformed hint: warn, never fail the batch from the scheduler
                logger.warning("request %s: ignoring moe_serve hints (%s)", req.rid, err)
                hints = parse_hints(None, self.settings.default_policy)
            self.hints[key] = hints
        return hints

    def _rested(self, reqs) -> tuple[bool, ...]:
        """Which requests rest this step (their hints are capped at K = 0 for it); a rest that has ended is
        forgotten. () where none rests."""
        out = [False] * len(reqs)
        for i, req in enumerate(reqs):
            until = self.resting.get(req.rid)
            if until is None:
                continue
            if len(req.output_ids) < until:
                out[i] = True
            else:
                del self.resting[req.rid]
        if len(self.resting) > 2 * len(reqs) + 64:  # requests that left while resting
            live = {req.rid for req in reqs}
            self.resting = {rid: until for rid, until in self.resting.items() if rid in live}
        return tuple(out) if any(out) else ()

    def _remember(self, requests: tuple[RequestStepStats, ...]) -> None:
        for r in requests:
            if r.k > 0:
                self.history.setdefault(r.request_id, deque(maxlen=RECENT_STEPS)).append(r.accepted)
        if len(self.history) > 2 * len(requests) + 64:
            live = {r.request_id for r in requests}
            self.history = {rid: h for rid, h in self.history.items() if rid in live}


def model_shape(model_config) -> dict[str, int]:
    """num_experts, top_k, num_layers of a target model, under the names the policies take."""
    config = model_config.hf_config
    config = getattr(config, "text_config", None) or config
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None) or 1
    top_k = getattr(config, "num_experts_per_tok", None) or 1
    return {"num_experts": int(experts), "top_k": int(top_k), "num_layers": int(config.num_hidden_layers)}


def _tokens_left(req) -> int | None:
    """Tokens the request may still generate: its max_new_tokens (SGLang's SamplingParams) less its output."""
    cap = getattr(req.sampling_params, "max_new_tokens", None)
    return None if cap is None else max(cap - len(req.output_ids), 0)
