"""Per-request speculation stats: what one request's decode steps did, summed while it runs and summarised when it
ends, for the response (stats_output.py carries the summary out of SGLang).

The step feeds it with one call per decode step (`record_step`, the whole batch at once). Every decode step of the
speculative worker must be recorded, K = 0 steps included: a request's step count and its K = 0 count come from here.
A request the speculative step never saw (an engine without speculation, or one that finished at prefill) is
summarised from its output length: every decode step of it was plain.

Summary fields (`RequestSpecStats.summary`): vLLM's per-request `metrics.speculative_decoding` names, so tools that
read vLLM's (`--per-request-spec-decode-metrics summary`) read ours, plus moe-serve's own:

    mean_acceptance_length     1 + num_accepted_draft_tokens / num_spec_steps   (1.0 when no step verified a draft)
    draft_acceptance_rate      num_accepted_draft_tokens / num_draft_tokens     (0.0 when none was verified)
    acceptance_histogram[j]    speculative steps that accepted exactly j drafts
    num_spec_steps             decode steps that verified at least one draft
    num_draft_tokens           drafts verified: sum over steps of min(K, draft depth)
    num_accepted_draft_tokens  drafts accepted
    num_spec_tokens            the largest K chosen for the request
    policy                     the speculation policy that decided K (None: no speculative step ran)
    k_chosen_histogram[k]      decode steps whose policy chose K = k
    num_decode_steps           decode steps after the first token (speculative or plain)
    num_steps_k0               decode steps with speculation off for this request (K = 0, or no speculation at all)
    num_shadow_drafts          draft positions judged without a verify (NGRAM drafts of K = 0 steps, shadow.py;
                               STANDALONE judgements, draft_model.py)
    num_shadow_accepted_drafts those the emitted tokens matched
    num_steps_resting          K = 0 steps in which its policy had let it rest: nothing drafted, judged or asked for
                               it (moe-serve's resting, Decision.rest_until)
    expert_reuse               mean share of a plain-decoded token's experts (over MoE layers) that the token before
                               it also routed to (None: no such pair), what an accepted draft would reuse; measured
                               in batches where some request may draft (a hint of max_k 0 for all: not measured)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

LIVE_REQUESTS_CAP = 16384  # requests tracked at once; beyond it the oldest is dropped (a request that never ended)


@dataclass
class RequestSpecStats:
    """One request's counts so far."""

    policy: str | None = None  # policy name of the latest step (a request keeps its policy)
    k_chosen: list[int] = field(default_factory=list)  # [K] decode steps whose policy chose K
    accepted: list[int] = field(default_factory=list)  # [j] speculative steps that accepted j drafts
    drafts_verified: int = 0  # drafts the target checked
    drafts_accepted: int = 0  # drafts the target accepted
    tokens: int = 0  # tokens the recorded steps produced (accepted + 1 each)
    plain_steps: int = 0  # decode steps outside the speculative step (engine without speculation)
    shadow_judged: int = 0  # draft positions judged against the emitted tokens instead of verified
    shadow_accepted: int = 0  # of them, matched
    reuse_sum: float = 0.0  # expert reuse summed over the plain steps that measured it
    reuse_steps: int = 0  # those steps
    resting: int = 0  # steps at rest (StepPlan.rest_until)

    def add(self, policy: str, k: int, verified: int, accepted: int) -> None:
        self.policy = policy
        _bump(self.k_chosen, k)
        if verified > 0:
            _bump(self.accepted, accepted)
        self.drafts_verified += verified
        self.drafts_accepted += accepted
        self.tokens += accepted + 1

    def summary(self) -> dict:
        spec_steps = sum(self.accepted)
        k_hist = list(self.k_chosen) or [0]
        k_hist[0] += self.plain_steps
        max_k = len(self.k_chosen) - 1 if self.k_chosen else 0
        histogram = self.accepted + [0] * (max_k + 1 - len(self.accepted))
        return {
            "mean_acceptance_length": 1.0 + self.drafts_accepted / spec_steps if spec_steps else 1.0,
            "draft_acceptance_rate": self.drafts_accepted / self.drafts_verified if self.drafts_verified else 0.0,
            "acceptance_histogram": histogram,
            "num_spec_steps": spec_steps,
            "num_draft_tokens": self.drafts_verified,
            "num_accepted_draft_tokens": self.drafts_accepted,
            "num_spec_tokens": max_k,
            "policy": self.policy,
            "k_chosen_histogram": k_hist,
            "num_decode_steps": sum(k_hist),
            "num_steps_k0": k_hist[0],
            "num_shadow_drafts": self.shadow_judged,
            "num_shadow_accepted_drafts": self.shadow_accepted,
            "num_steps_resting": self.resting,
            "expert_reuse": self.reuse_sum / self.reuse_steps if self.reuse_steps else None,
        }


class RequestStatsBook:
    """Requests in flight in one scheduler process: rid -> RequestSpecStats."""

    def __init__(self, capacity: int = LIVE_REQUESTS_CAP) -> None:
        self._live: OrderedDict[str, RequestSpecStats] = OrderedDict()
        self._capacity = capacity
        self.on_finish: list[Callable[[], None]] = []  # called as each request finishes (metrics.SpecMetrics.flush)

    def record_step(
        self,
        rids: Sequence[str],
        policies: Sequence[str],
        ks_chosen: Sequence[int],
        verified: Sequence[int],
        accepted: Sequence[int],
        reuse: Sequence[float | None] | None = None,
        resting: Sequence[bool] = (),
    ) -> None:
        """One decode step of the batch, in batch order: request rids[i] ran under policies[i], which chose
        K = ks_chosen[i]; the target verified verified[i] = min(K, draft depth) of its drafts and accepted
        accepted[i] <= verified[i] of them; reuse[i]: its token's expert reuse (RequestStepStats.expert_reuse);
        resting[i]: it rested this step (() = nobody did)."""
        reuse = reuse or [None] * len(rids)
        resting = resting or [False] * len(rids)
        rows = zip(rids, policies, ks_chosen, verified, accepted, reuse, resting, strict=True)
        for rid, policy, k, v, a, r, rests in rows:
            stats = self._live.get(rid)
            if stats is None:
                stats = self._live[rid] = RequestSpecStats()
                if len(self._live) > self._capacity:
                    self._live.popitem(last=False)
            stats.add(policy, int(k), int(v), int(a))
            if r is not None:
                stats.reuse_sum += r
                stats.reuse_steps += 1
            stats.resting += rests

    def record_shadow(self, outcomes) -> None:
        """Unverified drafts judged this step (service.policy.ShadowOutcome), of requests already recorded."""
        for o in outcomes:
            stats = self._live.get(o.request_id)
            if stats is not None:
                stats.shadow_judged += o.k
                stats.shadow_accepted += o.accepted

    def finish(self, rid: str, decode_tokens: int) -> dict:
        """The summary of a request that ended with `decode_tokens` tokens after its first; forgets it. Tokens the
        recorded steps do not account for came from plain decode steps, one each (no speculation on this engine)."""
        for call in self.on_finish:
            call()
        stats = self._live.pop(rid, None) or RequestSpecStats()
        stats.plain_steps = max(decode_tokens - stats.tokens, 0)
        return stats.summary()

    def __len__(self) -> int:
        return len(self._live)


def merge_summaries(summaries: Sequence[dict]) -> dict:
    """One summary for several sequences of one response (n > 1, several prompts): counts and histograms add up."""
    if len(summaries) == 1:
        return summaries[0]
    total = RequestSpecStats()
    for s in summaries:
        total.policy = s["policy"] or total.policy
        _add_lists(total.k_chosen, s["k_chosen_histogram"])
        _add_lists(total.accepted, s["acceptance_histogram"])
        total.drafts_verified += s["num_draft_tokens"]
        total.drafts_accepted += s["num_accepted_draft_tokens"]
        total.shadow_judged += s.get("num_shadow_drafts", 0)
        total.shadow_accepted += s.get("num_shadow_accepted_drafts", 0)
        total.resting += s.get("num_steps_resting", 0)
    reused = [s["expert_reuse"] for s in summaries if s.get("expert_reuse") is not None]
    out = total.summary()
    out["expert_reuse"] = sum(reused) / len(reused) if reused else None
    return out


def _bump(histogram: list[int], index: int) -> None:
    if len(histogram) <= index:
        histogram.extend([0] * (index + 1 - len(histogram)))
    histogram[index] += 1


def _add_lists(into: list[int], other: Sequence[int]) -> None:
    if len(into) < len(other):
        into.extend([0] * (len(other) - len(into)))
    for i, value in enumerate(other):
        into[i] += value
