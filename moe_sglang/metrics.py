"""moe-serve's speculation metrics on the engine's `/metrics` (SGLang's `--enable-metrics`, on by default in
`moe-serve engine|up`).

SGLang's HTTP process sets PROMETHEUS_MULTIPROC_DIR before it spawns the scheduler and serves `/metrics` through
prometheus_client's MultiProcessCollector, so counters and histograms created in the scheduler process (where our
hooks run) appear there with no endpoint of ours. Without that directory (metrics off) nothing is created.

Names, with the PromQL a dashboard uses next to each (deploy/grafana can reference the constants):
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left

from service.policy import StepStats

# histogram_quantile(0.5, sum by (le, policy) (rate(moe_serve:spec_k_chosen_bucket[5m])))   -- median K per policy
K_CHOSEN = "moe_serve:spec_k_chosen"
# sum by (policy, tenant) (rate(moe_serve:spec_off_request_steps_total[5m]))   -- request-steps decoded plainly (K=0)
SPEC_OFF = "moe_serve:spec_off_request_steps"
# sum by (policy, position) (rate(moe_serve:spec_accepted_at_position_total[5m]))
#   / sum by (policy, position) (rate(moe_serve:spec_proposed_at_position_total[5m]))   -- acceptance per position
ACCEPTED_AT = "moe_serve:spec_accepted_at_position"
PROPOSED_AT = "moe_serve:spec_proposed_at_position"
# histogram_quantile(0.5, sum by (le, policy) (rate(moe_serve:spec_step_accept_length_bucket[5m])))   -- tokens per step
ACCEPT_LENGTH = "moe_serve:spec_step_accept_length"  # the gateway's spec_accept_length is per request
# histogram_quantile(0.5, sum by (le, policy) (rate(moe_serve:spec_utility_bucket[5m])))
#   utility of a step for a policy's requests = tokens emitted / tokens verified (1 = no verify work wasted)
UTILITY = "moe_serve:spec_utility"
# sum by (phase) (rate(moe_serve:spec_step_seconds_sum[5m])) / sum by (phase) (rate(moe_serve:spec_step_seconds_count[5m]))
STEP_SECONDS = "moe_serve:spec_step_seconds"
# sum (rate(moe_serve:spec_mixed_steps_total[5m])) / sum (rate(moe_serve:spec_step_seconds_count{phase="verify"}[5m]))
#   share of steps whose batch had speculation on for some requests and off (K = 0) for others
MIXED_STEPS = "moe_serve:spec_mixed_steps"
# histogram_quantile(0.5, sum by (le, policy) (rate(moe_serve:verify_unique_experts_bucket[5m])))
#   distinct experts one MoE layer computed in one verify forward (one observation per layer per step)
UNIQUE_EXPERTS = "moe_serve:verify_unique_experts"
# sum by (policy) (rate(moe_serve:verify_budget_dropped_experts_total[5m]))   -- experts the budget kept out, all layers
BUDGET_DROPPED = "moe_serve:verify_budget_dropped_experts"

# sum (rate(moe_serve:verify_tokens_total[5m])) / sum (rate(moe_serve:target_forwards_total{kind="verify"}[5m]))
#   tokens one verify forward processed, counted from the forward's input (ragged: sum_i min(K_i, D_i) + 1)
VERIFY_TOKENS = "moe_serve:verify_tokens"
# sum (rate(moe_serve:decode_tokens_total[5m]))   -- tokens of plain decode forwards (steps where nobody speculated)
DECODE_TOKENS = "moe_serve:decode_tokens"
# sum by (kind) (rate(moe_serve:target_forwards_total[5m]))   -- decode steps by the target forward they ran:
#   kind="verify" (someone speculated) or kind="decode" (a plain decode step)
TARGET_FORWARDS = "moe_serve:target_forwards"
# sum (rate(moe_serve:draft_phases_total[5m]))   -- steps that ran the drafter (a request with K = 0 is not drafted for)
DRAFT_PHASES = "moe_serve:draft_phases"
# sum (rate(moe_serve:draft_catch_up_tokens_total[5m]))   -- tokens a draft model ran to catch up with requests that
#   start drafting after a pause or at their first draft (STANDALONE's lazy draft cache)
DRAFT_CATCH_UP_TOKENS = "moe_serve:draft_catch_up_tokens"

# vLLM's speculative-decoding counters under our prefix, so dashboards and queries written for vLLM's
# `vllm:spec_decode_*` read moe-serve's by renaming the prefix. As vLLM counts them, per request-step that verified
# at least one draft (a "draft"); with per-request K a draft holds min(K_i, draft depth) tokens.
# sum (rate(moe_serve:spec_decode_num_accepted_tokens_total[5m])) / sum (rate(moe_serve:spec_decode_num_draft_tokens_total[5m]))
#   draft acceptance rate
# 1 + sum (rate(moe_serve:spec_decode_num_accepted_tokens_total[5m])) / sum (rate(moe_serve:spec_decode_num_drafts_total[5m]))
#   mean acceptance length (tokens per speculative request-step, bonus token included)
VLLM_DRAFTS = "moe_serve:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "moe_serve:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "moe_serve:spec_decode_num_accepted_tokens"
# sum by (position) (rate(moe_serve:spec_decode_num_accepted_tokens_per_pos_total[5m]))
#   / scalar (sum (rate(moe_serve:spec_decode_num_drafts_total[5m])))   -- acceptance at each 0-based draft position
VLLM_ACCEPTED_PER_POS = "moe_serve:spec_decode_num_accepted_tokens_per_pos"

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
K_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
LENGTH_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17)
UTILITY_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
EXPERT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SECONDS_BUCKETS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0)


class SpecMetrics:
    """The Prometheus objects, created in the process that records (the scheduler).

    Steps are recorded into plain dicts and written to the Prometheus values by `flush`: when a request finishes
    (RequestStatsBook.finish, so a response never arrives before the counts of its steps), and at the first step
    recorded FLUSH_S after the previous write. Under SGLang's multiprocess collector every value written is a locked
    write to a shared file (~2 us each, ~15 a step at batch 1): once per step per series that is ~1.5 % of a
    2.5 ms batch-1 decode step of the bundled model, the overhead speculation must not add at K = 0. A histogram's
    observations are summed per bucket and written through prometheus_client's own bucket values (`_upper_bounds`,
    `_buckets`, `_sum`, as its `Histogram.observe` writes them; test_spec_metrics fails if a client drops them). Where
    SGLang's Rust egress turns the per-request summaries off (stats_output.py), no finish flushes: the steps' values
    are then written by the time rule alone, so the last second before the engine goes idle waits for its next step."""

    FLUSH_S = 1.0  # most seconds a recorded step waits for its write while steps run

    def __init__(self, registry=None) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        r = registry or REGISTRY  # the default registry is the one SGLang's multiprocess collector reads

        pt = ["policy", "tenant"]
        self.k = Histogram(K_CHOSEN, "Draft tokens K chosen per request-step", pt, buckets=K_BUCKETS, registry=r)
        self.off = Counter(SPEC_OFF, "Request-steps with speculation off (K = 0)", pt, registry=r)
        self.accepted_at = Counter(ACCEPTED_AT, "Drafts accepted at each position", ["policy", "position"], registry=r)
        self.proposed_at = Counter(
            PROPOSED_AT,
            "Drafts verified at each position (min(K, draft depth) >= position)",
            ["policy", "position"],
            registry=r,
        )
        self.accept_length = Histogram(
            ACCEPT_LENGTH, "Tokens per request-step (accepted + 1)", pt, buckets=LENGTH_BUCKETS, registry=r
        )
        self.utility = Histogram(
            UTILITY, "Tokens emitted / tokens verified per step", ["policy"], buckets=UTILITY_BUCKETS, registry=r
        )
        self.step_seconds = Histogram(
            STEP_SECONDS, "Step time by phase", ["phase"], buckets=SECONDS_BUCKETS, registry=r
        )
        self.verify_tokens = Counter(VERIFY_TOKENS, "Tokens processed by verify forwards", registry=r)
        self.decode_tokens = Counter(DECODE_TOKENS, "Tokens processed by plain decode forwards", registry=r)
        self.target_forwards = Counter(TARGET_FORWARDS, "Target forwards of decode steps", ["kind"], registry=r)
        self.draft_phases = Counter(DRAFT_PHASES, "Decode steps that ran the drafter", registry=r)
        self.catch_up = Counter(DRAFT_CATCH_UP_TOKENS, "Tokens a draft model ran to catch up", registry=r)
        self.mixed = Counter(MIXED_STEPS, "Steps with K = 0 and K > 0 requests in one batch", registry=r)
        self.unique = Histogram(
            UNIQUE_EXPERTS,
            "Unique experts of one layer in one verify forward",
            ["policy"],
            buckets=EXPERT_BUCKETS,
            registry=r,
        )
        self.dropped = Counter(
            BUDGET_DROPPED, "Experts dropped by the verify budget, summed over layers", ["policy"], registry=r
        )
        self.vllm_drafts = Counter(VLLM_DRAFTS, "Request-steps that verified drafts (vLLM's name)", pt, registry=r)
        self.vllm_draft_tokens = Counter(VLLM_DRAFT_TOKENS, "Draft tokens verified (vLLM's name)", pt, registry=r)
        self.vllm_accepted = Counter(VLLM_ACCEPTED, "Draft tokens accepted (vLLM's name)", pt, registry=r)
        self.vllm_accepted_per_pos = Counter(
            VLLM_ACCEPTED_PER_POS,
            "Draft tokens accepted at each 0-based position (vLLM's name)",
            ["policy", "position"],
            registry=r,
        )
        self._children: dict[tuple, object] = {}
        self._counts: dict[object, float] = {}  # counter child -> increments not yet written
        self._hists: dict[object, list] = {}  # histogram child -> [sum, count per bucket] not yet written
        # (policy, tenant, K chosen, drafts verified, drafts accepted) -> request-steps with that outcome, turned
        # into the per-request series at the flush (most request-steps of a batch look alike: counted once each)
        self._outcomes: dict[tuple[str, str, int, int, int], int] = {}
        self._flushed = time.monotonic()

    def _at(self, metric, *labels: str):
        """`metric.labels(*labels)`, remembered: prometheus_client validates and locks on every `labels()` call, and
        the scheduler records a few per request every step."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def _inc(self, child, amount: float = 1.0) -> None:
        self._counts[child] = self._counts.get(child, 0.0) + amount

    def _observe(self, child, value: float, times: int = 1) -> None:
        pending = self._hists.get(child)
        if pending is None:
            pending = self._hists[child] = [0.0] + [0] * len(child._upper_bounds)
        pending[0] += value * times
        pending[1 + bisect_left(child._upper_bounds, value)] += times  # the first bucket with value <= its bound

    def flush(self) -> None:
        """Write what was recorded since the last flush."""
        outcomes, self._outcomes = self._outcomes, {}
        for (policy, tenant, k, verified, accepted), n in outcomes.items():
            self._expand(policy, tenant, k, verified, accepted, n)
        counts, hists = self._counts, self._hists
        self._counts, self._hists, self._flushed = {}, {}, time.monotonic()
        for child, amount in counts.items():
            child.inc(amount)
        for child, (total, *buckets) in hists.items():
            child._sum.inc(total)
            for value, n in zip(child._buckets, buckets, strict=True):
                if n:
                    value.inc(n)

    def _maybe_flush(self) -> None:
        if time.monotonic() - self._flushed >= self.FLUSH_S:
            self.flush()

    def count_forward(self, kind: str, tokens: int) -> None:
        """A target forward of a decode step: kind "verify" or "decode", `tokens` = its input rows."""
        self._inc(self._at(self.target_forwards, kind))
        self._inc(self.verify_tokens if kind == "verify" else self.decode_tokens, tokens)

    def count_draft(self) -> None:
        self._inc(self.draft_phases)

    @classmethod
    def if_enabled(cls) -> SpecMetrics | None:
        return cls() if os.environ.get(MULTIPROC_ENV) else None

    def record(
        self, policies: list[str], tenants: list[str], stats: StepStats, dropped: int, chosen: tuple[int, ...] = ()
    ) -> None:
        """`chosen`: the K each request's policy chose (default: the k verified, stats.requests[i].k)."""
        chosen = chosen or tuple(r.k for r in stats.requests)
        outcomes = self._outcomes
        for policy, tenant, r, k in zip(policies, tenants, stats.requests, chosen, strict=True):
            key = (policy, tenant, k, r.k, r.accepted)
            outcomes[key] = outcomes.get(key, 0) + 1
        for policy in dict.fromkeys(policies):
            mine = [r for p, r in zip(policies, stats.requests, strict=True) if p == policy]
            verified = len(mine) * stats.verify_width if stats.verify_width else sum(r.k + 1 for r in mine)
            self._observe(self._at(self.utility, policy), sum(r.accepted + 1 for r in mine) / verified)
        drafting = stats.draft_s + stats.judge_s  # the draft model's time, judgements included
        for phase, seconds in (("draft", drafting), ("verify", stats.verify_s), ("other", stats.other_s)):
            self._observe(self._at(self.step_seconds, phase), seconds)
        batch_policy = policies[0] if len(set(policies)) == 1 else "mixed"
        if len({k == 0 for k in chosen}) == 2:
            self._inc(self.mixed)
        if stats.draft_backlog_tokens + stats.judge_tokens:
            self._inc(self.catch_up, stats.draft_backlog_tokens + stats.judge_tokens)
        for unique in () if stats.plain else stats.unique_experts:  # verify forwards only (the metric's meaning)
            self._observe(self._at(self.unique, batch_policy), unique)
        if dropped:
            self._inc(self._at(self.dropped, batch_policy), dropped)
        self._maybe_flush()

    def _expand(self, policy: str, tenant: str, k: int, verified: int, accepted: int, n: int) -> None:
        """The per-request series of `n` request-steps whose policy chose `k` and which verified `verified` drafts
        and accepted `accepted`."""
        self._observe(self._at(self.k, policy, tenant), k, n)
        if k == 0:
            self._inc(self._at(self.off, policy, tenant), n)
        self._observe(self._at(self.accept_length, policy, tenant), accepted + 1, n)
        for position in range(1, verified + 1):
            self._inc(self._at(self.proposed_at, policy, str(position)), n)
            if position <= accepted:
                self._inc(self._at(self.accepted_at, policy, str(position)), n)
        if verified == 0:
            return  # no draft this request-step: vLLM counts only steps that proposed one
        self._inc(self._at(self.vllm_drafts, policy, tenant), n)
        self._inc(self._at(self.vllm_draft_tokens, policy, tenant), verified * n)
        self._inc(self._at(self.vllm_accepted, policy, tenant), accepted * n)
        for position in range(accepted):
            self._inc(self._at(self.vllm_accepted_per_pos, policy, str(position)), n)
