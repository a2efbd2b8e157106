"""The nouns of the policy layer: what the engine shows a policy each step, what it measured, what the policy decided.

All frozen, all plain numbers: the SGLang integration builds them from engine state every step (issue 4).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SloClass:
    """A latency class a tenant's request belongs to; None targets mean "no constraint"."""

    name: str  # label, e.g. "interactive" or "batch"
    ttft_s: float | None = None  # seconds, time-to-first-token target
    tpot_s: float | None = None  # seconds per output token target


@dataclass(frozen=True)
class RequestView:
    """One decoding request as a policy sees it before a step."""

    request_id: str  # engine request id, stable across steps
    tenant: str = "default"  # tenant name from the gateway hints
    slo: SloClass | None = None  # latency class from the gateway hints; None = best effort
    tokens_so_far: int = 0  # tokens generated so far
    context_len: int = 0  # tokens in this request's KV cache (prompt + generated)
    recent_accepts: tuple[int, ...] = ()  # accepted draft tokens in the last few verify steps, oldest first
    draft_confidences: tuple[
        float, ...
    ] = ()  # drafter probability of each token drafted this step (empty before drafting)
    draft_depth: int | None = None  # drafts the drafter already built for this request this step (a chain's depth,
    # a tree's node count), for an engine that plans after drafting, as moe-serve's NGRAM engine does (its lookup
    # costs the same whatever K); a K beyond it verifies nothing more. None: decided before drafting
    draft_backlog: int = 0  # tokens the drafter must run to catch up before it can draft for this request (a draft
    # model whose cache lags the request: moe-serve's STANDALONE fills it only when the request drafts); 0 = in step
    tokens_left: int | None = None  # tokens the request may still generate (max_new_tokens); None = unknown


# ragged: request i verifies its own K_i + 1 tokens (moe-serve's SGLang engines, moe_sglang/ragged.py; the simulator).
# rectangular: every request verifies max_i K_i + 1 tokens, K_i only caps what it may accept (a fixed-width verify
# kernel; the engines' --verify-layout rectangular, for comparisons).
# fixed: every request verifies the whole draft (max_k + 1) whatever K is chosen; K only caps acceptance (SGLang's own
# layout).
VERIFY_LAYOUTS = ("ragged", "rectangular", "fixed")


@dataclass(frozen=True)
class BatchView:
    """The decode batch at the start of a step."""

    now: float  # seconds, engine clock (policies never read a clock themselves)
    requests: tuple[RequestView, ...]  # the running decode requests
    max_k: int  # draft tokens, the most the engine's drafter can produce per request this step
    verify_layout: str = "ragged"  # VERIFY_LAYOUTS: how the engine's verify forward is laid out
    # the engine can judge a request's drafter without verifying: asked by Decision.judge, it runs its drafter over
    # the request's committed tokens and compares each prediction with the token the target emitted there
    # (moe-serve's STANDALONE, moe_sglang/draft_judge.py), outcomes in StepStats.shadow
    judging: bool = False
    # a judgement's draft forward runs beside the target's forward, on a core of its own (moe-serve's STANDALONE with
    # its draft thread, moe_sglang/draft_thread.py): the step waits for almost none of it
    judge_beside: bool = False
    # the drafter stops a request's chain at its first draft its acceptance head doubts, where Decision.accept_stop
    # asks (moe-serve's STANDALONE with a head beside its draft, moe_sglang/draft_stop.py): what a chain verifies is
    # gated draft by draft on the draft's own features, not only capped by K. moe-serve then lets a new request
    # speculate before its first judgement (paired rounds: 0.97-0.98x of the TPOT with the wait over three runs of
    # the STANDALONE cells, bench/results/head-first-s78)
    gated: bool = False
    # plain decode forwards the engine runs in one scheduler step while no request of the batch may draft (every one
    # resting, Decision.rest_until, or capped at K = 0): moe_sglang/plain_burst.py; 1 = a step per token
    plain_burst: int = 1

    def __post_init__(self) -> None:
        if self.max_k < 0:
            raise ValueError(f"max_k must be >= 0, got {self.max_k}")
        if self.plain_burst < 1:
            raise ValueError(f"plain_burst must be >= 1, got {self.plain_burst}")
        if self.verify_layout not in VERIFY_LAYOUTS:
            raise ValueError(f"verify_layout must be one of {VERIFY_LAYOUTS}, got {self.verify_layout!r}")

    def verify_tokens(self, ks: list[int]) -> int:
        """Tokens the target verifies if request i keeps ks[i] drafts."""
        if self.verify_layout == "rectangular":
            return len(ks) * (max(ks, default=0) + 1)
        if self.verify_layout == "fixed":
            return len(ks) * (self.max_k + 1)
        return sum(ks) + len(ks)


@dataclass(frozen=True)
class RequestDecision:
    request_id: str  # matches RequestView.request_id
    k: int  # draft tokens to propose; 0 = plain decode for this request
    verify_len: int  # draft tokens sent to verification after trimming, 0 <= verify_len <= k

    def __post_init__(self) -> None:
        if not 0 <= self.verify_len <= self.k:
            raise ValueError(f"request {self.request_id!r}: need 0 <= verify_len <= k, got {self.verify_len}, {self.k}")


@dataclass(frozen=True)
class Decision:
    """What to do this step; `requests` is in the batch's order."""

    requests: tuple[RequestDecision, ...]  # one per request in the BatchView, same order
    expert_budget: tuple[int, ...] | None = None  # [num_layers] experts kept per MoE layer in verify; None = no budget
    # requests at K = 0 whose drafter the engine judges this step without a verify (BatchView.judging)
    judge: frozenset[str] = frozenset()
    # per request in `requests` order: the engine keeps it at K = 0 without asking a policy about it until its
    # tokens_so_far reaches this count (0: not resting); () = nobody rests. A drafter whose draft is in hand for free
    # (NGRAM) still judges it by the tokens emitted (StepStats.shadow); a judgement that accepts the whole draft ends
    # the rest, for the engine and for the policy alike
    rest_until: tuple[int, ...] = ()
    # a drafter that drafts depth by depth (STANDALONE chains) stops a request's draft at the first token whose
    # probability is below this multiple of its runner-up's and verifies the drafts above it (0: drafts to K)
    draft_stop: float = 0.0
    # ... and, where the drafter has an acceptance head, at the first draft it gives an acceptance probability below
    # this instead (0: the margin alone; moe_sglang/draft_stop.py)
    accept_stop: float = 0.0

    def __post_init__(self) -> None:
        if self.draft_stop < 0 or 0 < self.draft_stop < 1:
            raise ValueError(f"draft_stop must be 0 (off) or >= 1, got {self.draft_stop}")
        if not 0 <= self.accept_stop < 1:
            raise ValueError(f"accept_stop must be a probability in [0, 1) (0: off), got {self.accept_stop}")
        if self.rest_until and len(self.rest_until) != len(self.requests):
            raise ValueError(f"rest_until has {len(self.rest_until)} entries for {len(self.requests)} requests")
        for r, until in zip(self.requests, self.rest_until, strict=False):
            if until < 0 or (until > 0 and r.k > 0):
                raise ValueError(f"request {r.request_id!r}: rest_until {until} needs K = 0 and a count >= 0")

    def k_of(self, request_id: str) -> int:
        """Draft tokens chosen for one request (linear scan: batches are small and this is for tests/tools)."""
        for r in self.requests:
            if r.request_id == request_id:
                return r.k
        raise KeyError(f"no decision for request {request_id!r}")


@dataclass(frozen=True)
class RequestStepStats:
    request_id: str  # matches RequestView.request_id
    k: int  # draft tokens verified for this request (after trimming); 0 = plain decode
    accepted: int  # draft tokens accepted, 0 <= accepted <= k (the bonus token is not counted)
    # share of the experts this step's token routed to (mean over MoE layers) that the request's previous token also
    # routed to, both decoded by plain steps; None where not measured (a verify step, the first plain step)
    expert_reuse: float | None = None

    def __post_init__(self) -> None:
        if self.expert_reuse is not None and not 0.0 <= self.expert_reuse <= 1.0:
            raise ValueError(f"request {self.request_id!r}: expert_reuse must be in [0, 1], got {self.expert_reuse}")
        if not 0 <= self.accepted <= self.k:
            raise ValueError(f"request {self.request_id!r}: need 0 <= accepted <= k, got {self.accepted}, {self.k}")


@dataclass(frozen=True)
class ShadowOutcome:
    """A draft the engine built but did not verify (its request ran at K = 0 while the drafter's work was done
    anyway, as NGRAM's lookup is, or the policy asked for a judgement, Decision.judge), judged against the tokens
    the target emitted: acceptance measured without a verify. Greedy: exactly what a verify would have accepted;
    sampled: each judged position is an unbiased estimate of the acceptance probability of that (deterministic)
    draft token."""

    request_id: str
    draft_depth: int  # RequestView.draft_depth of the step that built the draft (a judgement: the depth judged)
    k: int  # positions judged along the draft: the accepted ones, and the first rejected one if any
    accepted: int  # positions the emitted tokens matched, 0 <= accepted <= k

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.k:
            raise ValueError(f"request {self.request_id!r}: need 0 <= accepted <= k, got {self.accepted}, {self.k}")

    @property
    def whole(self) -> bool:
        """The draft was accepted to its end (no position rejected): what ends a rest (Decision.rest_until)."""
        return 0 < self.accepted == self.k


@dataclass(frozen=True)
class StepStats:
    """What one decode step measured, reported after it ran."""

    now: float  # seconds, engine clock at the end of the step
    batch_size: int  # requests in the step
    requests: tuple[RequestStepStats, ...]  # per request, in batch order
    draft_s: float  # seconds spent drafting
    verify_s: float  # seconds in the target forward (verify, or plain decode when every k is 0)
    other_s: float  # seconds outside draft and verify (sampling, scheduling, bookkeeping)
    unique_experts: tuple[int, ...] = ()  # [num_layers] distinct experts activated in the verify forward
    context_tokens: int = 0  # tokens in all KV caches of the batch
    draft_steps: int = 0  # sequential draft forwards that depended on the decision (the largest K drafted); 0 when
    # the drafter's work is fixed per step (the SGLang engine): draft_s then counts as fixed step cost
    verify_width: int = 0  # tokens per request in a rectangular verify; 0 = each request verified its k + 1
    plain: bool = False  # the target ran a plain decode forward (nobody verified a draft): no verify bookkeeping
    shadow: tuple[ShadowOutcome, ...] = ()  # unverified drafts this step finished judging (moe_sglang/shadow.py)
    draft_backlog_tokens: int = 0  # tokens the drafter ran this step to catch up (RequestView.draft_backlog of the
    # requests that drafted): part of draft_s that grows with the requests' lag, not with K
    judge_s: float = 0.0  # seconds judging drafters without a verify (Decision.judge): one forward, not in draft_s
    judge_tokens: int = 0  # tokens the judging forward ran besides the judged requests' roots (their catch-up)

    @property
    def step_s(self) -> float:  # seconds, wall time of the whole step
        return self.draft_s + self.judge_s + self.verify_s + self.other_s

    @property
    def verify_tokens(self) -> int:  # tokens the target processed
        if self.verify_width:
            return self.batch_size * self.verify_width
        return sum(r.k + 1 for r in self.requests)

    @property
    def emitted_tokens(self) -> int:  # tokens the step produced: accepted drafts + 1 per request
        return sum(r.accepted + 1 for r in self.requests)
