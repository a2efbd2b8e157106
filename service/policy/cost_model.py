"""MoESD's cost model of speculative verification on a sparse MoE (its formulas in moesd.py), plus the step-time fit
moe-serve prices K with.

Real routers have token-to-expert affinity: consecutive tokens of one request tend to reuse experts (Cascade §2,
MoESD). `StepTimeModel` counts a request's extra verify tokens as (1 - a) fresh routings each, i.e.
N = E·(1 - (1 - k/E)^F), F = B + (n - B)·(1 - a), and learns a from measured unique experts by inverting N.
Where the caller knows how many of the drafts it expects accepted, the affinity is split by outcome: an accepted
draft is a token the target would have emitted itself, a rejected one (and every draft after it) is not, and they
route differently: on the CPU engine's moe-fine x48 a 4-token STANDALONE verify whose 3 drafts were all accepted hit
16-21 experts over its 4 layers (about one token's), one whose drafts were rejected 29-48, and took 46-60 ms
against 82-97. F = B + A·(1 - a_acc) + (n - B - A)·(1 - a_rej) for A expected accepted drafts, a_acc and a_rej
fitted by least squares on measured steps (`expert_routing.SplitAffinity`); with no fit yet, or no expectation
given, the single a. Both are learnt per batch-size bucket (1, 2-3, 4-7, 8-15, ...: `Routing`): inverting N is
ill-posed once a batch covers most experts, where uniform routing over-predicts what one more token adds. Learnt at
batch 8 on the CPU engine (moe-fine x48, NGRAM: 21 of 32 experts per layer at K = 0) the split priced a rejected
draft at 0.1-0.2 fresh routings, so a batch-1 request that followed (math, p ~ 0.3) kept verifying one draft,
predicted +20 % step time, at least +58 % measured (static-1 on that cell: 1.58x of no speculation's TPOT; moe-serve
1.29x in the deciding bench). A bucket not measured yet borrows from the nearest smaller one measured (less
saturated), else starts from the prior affinity.
An engine that runs a plain decode when nobody verifies a draft (moe-serve's) skips the verify path's fixed work
(tree bookkeeping, acceptance, the KV move): `verify_extra` (per request) and a separate per-step overhead
(`StepTimeModel.other_time`, per batch-size bucket) price that difference,
so switching a whole batch from K = 0 to K = 1 costs what it costs.
Calibration: the linear fit is shared by every batch size, and its residuals on speculative steps are not noise
but bias of one sign per batch-size bucket: on the CPU engine (moe-fine x48, AMD EPYC) the batch-1 STANDALONE
steps took 1.24-1.47x what it predicted (61-67 ms for a one-draft verify priced at 42-49 ms) while the batch-8 NGRAM
steps took 0.80x. So each bucket keeps its latest speculative steps, and at every refit the median of measured /
predicted over them (`step_calibration.Calibration`) scales what the model predicts for a speculative step of that
size, taken per group of like steps (the same draft depth, mostly accepted or not) where the group has enough of
them, since the fit is off by different factors for different steps; the spread of that ratio (median absolute
deviation of its log about each step's group) is the model's measured error there, which the policy asks a
predicted gain to exceed (moe_serve.py, margin). Plain steps are calibrated the same way, by a ratio of their own
per bucket: the fit is dominated by the speculative steps and priced plain steps with a bias too (Intel Xeon,
moe-fine x48, NGRAM: measured / predicted 0.94 at batch 1 and 0.73 at batch 8), and a plain step priced 36 % too
dear against calibrated speculative ones made batch-8 arithmetic speculate on drafts judged at p = 0-0.1.
Until a bucket's speculative steps are calibrated they are priced by its plain steps' ratio where that is above 1,
else by the fit alone: a plain step that runs under the fit says nothing of a verify's. The two part where the
verify of several rows per expert is bound by compute and the plain step by bytes: on the CPU engine (moe-fine x48,
bfloat16 experts, AMD EPYC with AVX-512, 2026-11-30) batch-8 plain steps ran 0.72x the fit while STANDALONE
three-draft steps of eight requests ran ~1.17x it (104 ms, priced 64 by the plain ratio, 89 by the fit); priced by
the plain ratio, each arithmetic wave at batch 8 paid first judgements (~55 ms, a draft-model catch-up over eight
131-token contexts) on a gain hoped at 1.4-3.7x their cost, where no static K paid (bench/results/awake-s46).
(Before bfloat16 experts, a prose wave's mostly accepted batch-8 steps ran near the plain ratio's price, 1.29x under
the fit's, and paid.)
"""

from __future__ import annotations

from collections import deque

from service.policy import cost_variants
from service.policy.expert_routing import Routing, batch_bucket
from service.policy.least_squares import fit_nonnegative
from service.policy.moesd import routing_events
from service.policy.step_calibration import Calibration
from service.policy.step_coefficients import MoeShape, StepCoefficients
from service.policy.step_pricer import StepPricer

# Speculative steps fitted from which verify_extra (informed by speculative steps only) is the fit's alone; before, it
# counts in proportion. On the CPU engine (moe-fine x48, STANDALONE, AVX-512) two code verifies alone set it to 4.9 ms a
# request (15 ms plain step): no later judgement paid, so nothing corrected it and prose never speculated after code.
EXTRA_TRUST_STEPS = 8


class StepTimeModel:
    """Predicts step time of a hypothetical (tokens, draft) configuration; refits itself from measured steps."""

    def __init__(
        self,
        shape: MoeShape,
        prior: StepCoefficients,
        window: int = 256,
        ridge: float = 1e-3,
        affinity: float = 0.0,
        calibrate: bool = True,
    ) -> None:
        self.shape = shape
        self.calibrate = calibrate  # scale speculative steps by their bucket's measured / predicted (docstring)
        self.coef = prior  # current coefficients (the prior until data arrives)
        self._prior = prior
        self._ridge = ridge  # weight of the prior, in units of squared normalised features
        self._verify_rows: deque[tuple[list[float], float]] = deque(maxlen=window)
        self._draft_rows: deque[tuple[list[float], float]] = deque(maxlen=window)
        self._judge_rows: deque[tuple[list[float], float]] = deque(maxlen=window)  # `judgement_time`'s
        self._other: dict[bool, float] = {}  # plain step or not -> EMA of seconds outside draft and target forward
        self._other_by_bucket: dict[tuple[bool, int], float] = {}  # the same per batch-size bucket (`other_time`)
        self._other_fit: dict[tuple[bool, int], float] = {}  # what `other_time` prices: the above at the last refit
        self._other_memo: dict[tuple[bool, int], float] = {}  # `other_time`'s answers since the last refit
        self._plain_memo: dict[tuple[int, int | None], tuple[float, float]] = {}  # `_plain_price`'s since then
        self._prior_affinity = affinity  # a bucket's affinity before it (or a smaller one) is measured
        self._unmeasured = Routing(affinity)  # what `routing` answers before any bucket at or below is measured
        self._routing: dict[int, Routing] = {}  # batch_bucket -> what its verifies measured
        self._hope = False  # `hoped`: accepted drafts at the target's own routing where no split is measured
        self._fresh_accepted: float | None = None  # `reusing`: fresh routings per accepted draft, measured
        self._own_ratio = 1.0  # `owning`: a request's own measured / predicted on its speculative steps
        self._scout = False  # `scouting`: an uncalibrated bucket's speculative steps at its plain steps' ratio
        # (plain, batch_bucket) of the steps seen: the first plain and the first speculative step of each batch-size
        # bucket are not fitted, they pay one-time costs (`warmed`)
        self._warmed: set[tuple[bool, int]] = set()
        self._calibration: dict[int, Calibration] = {}  # batch_bucket -> its speculative steps' measured / predicted
        self._plain_calibration: dict[int, Calibration] = {}  # batch_bucket -> the same for its plain steps
        self._drafted = False  # a measured step ran decision-dependent drafting, fitted or not

    def experts(self, tokens: float, requests: int, budget: int | None = None, accepted: float | None = None) -> float:
        """Predicted Σ over layers of distinct experts when `requests` requests verify `tokens` tokens in all;
        `accepted`: how many of the drafts are expected accepted (None: not known, the single affinity)."""
        return StepPricer(self, requests, budget).experts(tokens, accepted)

    def pricer(self, requests: int, budget: int | None = None) -> StepPricer:
        """Prices of steps of `requests` requests, what they share looked up once (step_pricer.py): for pricing
        many configurations of one batch at once; valid until the next measured step (`add`) or refit."""
        return StepPricer(self, requests, budget)

    def routing(self, requests: int) -> Routing:
        """Expert reuse for a batch of `requests`: its bucket's, else the nearest smaller bucket's that was
        measured, else the prior's (module docstring)."""
        bucket = batch_bucket(requests)
        best, found = 0, self._unmeasured  # called for every priced configuration: no allocation here
        for b, r in self._routing.items():
            if best < b <= bucket and r.steps > 0:
                best, found = b, r
        return found

    hoped = cost_variants.hoped
    reusing = cost_variants.reusing
    owning = cost_variants.owning
    scouting = cost_variants.scouting

    def calibrated(self, requests: int) -> bool:
        """Whether this batch size's bucket prices speculative steps by their own measured ratio
        (`StepPricer.scale`)."""
        found = self._calibration.get(batch_bucket(requests))
        return found is not None and found.measured

    def warmed(self, requests: int, plain: bool) -> bool:
        """Whether a plain (or speculative) step of this batch-size bucket was measured before. The first one pays
        one-time costs and is not fitted: on the CPU engine (NGRAM, moe-fine x48) an engine's first verify took 24-129
        ms against 17-21 for the later ones of its size (7 engines). Later steps at a new verify size do not: the
        first step of each of 16 sizes met after it (batch 1 and 8, 2-40 verify tokens) took 0.73-1.16x the next step
        of its size, median 1.02 (forty-sixth session, bench/results/awake-s46). The first step at every size was
        left out before, and a batch-8 bucket whose ragged verifies came in many sizes had 1 of its first 4
        speculative steps to calibrate on: it priced eight requests' two- and three-draft steps at 0.69-0.78x what
        they took (K = 3 at 57.5 ms, measured 84)."""
        return (plain, batch_bucket(requests)) in self._warmed

    def verify_time(
        self, tokens: int, requests: int, budget: int | None = None, accepted: float | None = None
    ) -> float:
        """The target forward: a plain decode when no request verifies a draft (tokens == requests), else a verify;
        either scaled by its bucket's calibration (`StepPricer.scale`); a verify never under a plain decode
        (`_plain_price`)."""
        return StepPricer(self, requests, budget).verify(tokens, accepted)

    def step_time(
        self,
        tokens: int,
        requests: int,
        draft_steps: int,
        draft_tokens: int,
        budget: int | None = None,
        backlog_tokens: float = 0,
        accepted: float | None = None,
    ) -> float:
        """`backlog_tokens`: tokens the draft model must run first to catch up (StepStats.draft_backlog_tokens);
        `accepted`: drafts expected accepted (`experts`). Scaled by its bucket's calibration (`StepPricer.scale`); a
        speculative step never under a plain one (`_plain_price`)."""
        return StepPricer(self, requests, budget).step(tokens, draft_steps, draft_tokens, backlog_tokens, accepted)

    def _plain_price(self, requests: int, budget: int | None) -> tuple[float, float]:
        """The (target forward, step) a plain decode of `requests` is priced at: the floor of a speculative step's
        price, which does all a plain decode of its requests does and more. Calibrated and scaled prices need not
        keep to it (each is a ratio measured on other steps, and `owning` may scale a request's below 1): a
        speculative step priced under a plain one makes its drafts look free at any acceptance. Worked out once
        per refit (plain prices do not depend on `hoped`, `reusing` or `owning`)."""
        key = (requests, budget)
        found = self._plain_memo.get(key)
        if found is None:
            pricer = StepPricer(self, requests, budget)
            scale = pricer.scale(requests, 0, None)
            verify = pricer.raw_verify(requests)
            found = self._plain_memo[key] = (verify * scale, (verify + self.other_time(True, requests)) * scale)
        return found

    def _raw_step_time(
        self,
        tokens: int,
        requests: int,
        draft_steps: int,
        draft_tokens: int,
        budget: int | None,
        backlog_tokens: float,
        accepted: float | None,
    ) -> float:
        return StepPricer(self, requests, budget).raw_step(tokens, draft_steps, draft_tokens, backlog_tokens, accepted)

    def judgement_time(self, catch_up_tokens: float) -> float:
        """Seconds of one judging forward (Decision.judge) that catches the draft model up on `catch_up_tokens`
        besides the judged roots: fitted on the judgements measured (a forward over a context, whose fixed cost is
        not a draft step's), until then priced as a draft step with its catch-up."""
        c = self.coef
        fixed = c.per_draft_step if c.per_judgement is None else c.per_judgement
        per_token = c.per_backlog_token if c.per_judged_token is None else c.per_judged_token
        return fixed + per_token * catch_up_tokens

    def calibration_due(self) -> bool:
        """Whether a batch-size bucket has just measured enough speculative (or plain) steps to be calibrated
        (`Calibration`)."""
        return any(c.due for c in (*self._calibration.values(), *self._plain_calibration.values()))

    def error(self, requests: int, draft_steps: int | None = None) -> float | None:
        """The model's relative error on speculative steps of this batch size (MAD of log measured / predicted),
        of this draft depth where the drafter's steps follow it (Calibration.spread_for); None until its bucket
        (or that depth in it) has enough of them."""
        found = self._calibration.get(batch_bucket(requests))
        return None if found is None else found.spread_for(draft_steps)

    def other_time(self, plain: bool, requests: int) -> float:
        """Seconds of a step outside drafting and the target forward (bookkeeping, acceptance, the KV move), as
        measured in its batch-size bucket, else in the nearest measured bucket (the smaller on a tie), else the
        coefficient. It grows with the batch: on the CPU engine (moe-fine x48, NGRAM) a verify step's was ~2 ms at
        batch 1 and ~4 ms at batch 8; one average over all sizes priced every batch-1 verify ~3.5 ms (~10 %) too
        dear, and batch-1 requests whose drafts paid stayed at K = 0."""
        key = (plain, batch_bucket(requests))
        found = self._other_memo.get(key)
        if found is None:  # priced for every configuration tried: the nearest bucket is looked up once per refit
            measured = [b for p, b in self._other_fit if p == plain]
            if measured:
                found = self._other_fit[(plain, min(measured, key=lambda b: (abs(b - key[1]), b)))]
            else:
                found = self.coef.plain_other if plain and self.coef.plain_other is not None else self.coef.other
            self._other_memo[key] = found
        return found

    def add(
        self,
        tokens: int,
        requests: int,
        unique_experts: list[int] | tuple[int, ...],
        draft_steps: int,
        draft_tokens: int,
        verify_s: float,
        draft_s: float,
        other_s: float,
        plain: bool = False,
        backlog_tokens: int = 0,
        accepted: int | None = None,
        fresh_accepted: float | None = None,
        judge_s: float = 0.0,
        judge_tokens: int = 0,
    ) -> None:
        """Record one measured step (refit happens in `refit`, so callers choose how often to pay for it). With no
        draft steps (a drafter whose work does not follow K), `draft_s` is fixed step cost, added to `other`.
        `plain`: the target ran a plain decode (no verify path); `backlog_tokens`: catch-up tokens the draft model
        ran (without this feature their cost would be fitted as per-step or per-draft cost); `accepted`: drafts the
        step's verify accepted (teaches the split affinity); `fresh_accepted`: what the step's requests' accepted drafts
        were priced at (`reusing`), so that its calibration compares it with that price; `judge_s`, `judge_tokens`:
        the step's judging forward and its catch-up (StepStats.judge_s), fitted apart (`judgement_time`)."""
        self._drafted = self._drafted or draft_steps > 0
        if not self.warmed(requests, plain):
            self._warmed.add((plain, batch_bucket(requests)))
            return
        if unique_experts:
            mean_unique = sum(unique_experts) / len(unique_experts)
            if tokens > requests:  # only steps with drafts tell anything about affinity
                fresh = routing_events(mean_unique, self.shape.num_experts, self.shape.top_k)
                a_now = min(max(1.0 - (fresh - requests) / (tokens - requests), 0.0), 1.0)
                # a running mean at first (a prior of 0 would hold the expert count near uniform routing's, far
                # above what one request's consecutive tokens hit), then an EMA over about ten steps
                routing = self._routing.setdefault(batch_bucket(requests), Routing(self._prior_affinity))
                routing.steps += 1
                routing.affinity += max(1.0 / routing.steps, 0.1) * (a_now - routing.affinity)
                if accepted is not None:
                    routing.split.add(accepted, tokens - requests - accepted, fresh - requests)
            total = float(sum(unique_experts)) * self.shape.num_layers / len(unique_experts)
        else:
            total = self.experts(tokens, requests)
        # the verify path's extra work is per request (its tree, mask and acceptance): fitted as one constant per
        # step, batch 8's priced a batch-1 verify on the CPU engine at 51 ms where it took 39-41 (moe-fine x48, NGRAM)
        self._verify_rows.append(([1.0, 0.0 if plain else float(requests), float(tokens), total], verify_s))
        if judge_s > 0:
            self._judge_rows.append(([1.0, float(judge_tokens)], judge_s))
        if draft_steps:
            self._draft_rows.append(([float(draft_steps), float(draft_tokens), float(backlog_tokens)], draft_s))
        else:
            other_s += draft_s
        if self.calibrate and not plain and tokens > requests:
            rows = self._calibration.setdefault(batch_bucket(requests), Calibration(self._predict_raw))
            rows.add(
                (tokens, requests, draft_steps, draft_tokens, backlog_tokens, accepted, fresh_accepted),
                verify_s + draft_s + other_s,
            )
        elif self.calibrate and tokens <= requests:
            rows = self._plain_calibration.setdefault(batch_bucket(requests), Calibration(self._predict_raw))
            rows.add((tokens, requests, 0, 0, 0, None, None), verify_s + draft_s + other_s)
        for ema, key in ((self._other, plain), (self._other_by_bucket, (plain, batch_bucket(requests)))):
            last = ema.get(key)
            ema[key] = other_s if last is None else 0.9 * last + 0.1 * other_s

    def refit(self) -> None:
        p = self._prior
        verify = (p.verify_fixed, p.verify_extra, p.per_token, p.per_expert)
        scale = self._prior_scale()  # a pass over every fitted row: once per refit, not once per coefficient
        draft = tuple(scale * c for c in (p.per_draft_step, p.per_draft_token, p.per_backlog_token))
        if self._verify_rows:
            verify = fit_nonnegative(self._verify_rows, verify, self._ridge)
            spec = sum(1 for row, _ in self._verify_rows if row[1] > 0)  # trusted in proportion: EXTRA_TRUST_STEPS
            extra = p.verify_extra + min(spec / EXTRA_TRUST_STEPS, 1.0) * (verify[1] - p.verify_extra)
            verify = (verify[0], extra, *verify[2:])
        if self._draft_rows:
            draft = fit_nonnegative(self._draft_rows, draft, self._ridge)
        elif self._verify_rows and not self._drafted:
            draft = (0.0, 0.0, 0.0)  # steps measured, none with decision-dependent drafting: drafting is in `other`
        # else drafting ran but no step of it is fitted yet (a first step at its size is not): the prior's draft
        # costs at this machine's scale, not zero (zero priced every draft as free on the CPU engine until the next
        # refit after a drafting step; in the meantime a batch of 8 probed and speculated at 1.3x a plain step)
        judge = (None, None)  # no judgement measured: `judgement_time` prices one as a draft step with its catch-up
        if self._judge_rows:
            judge = fit_nonnegative(
                self._judge_rows, (scale * p.per_draft_step, scale * p.per_backlog_token), self._ridge
            )
        other = self._other.get(False, self._other.get(True, p.other))
        self._other_fit, self._other_memo, self._plain_memo = dict(self._other_by_bucket), {}, {}
        self.coef = StepCoefficients(
            verify_fixed=max(verify[0], 0.0),
            verify_extra=max(verify[1], 0.0),
            per_token=max(verify[2], 0.0),
            per_expert=max(verify[3], 0.0),
            per_draft_step=max(draft[0], 0.0),
            per_draft_token=max(draft[1], 0.0),
            per_backlog_token=max(draft[2], 0.0),
            per_judgement=judge[0],
            per_judged_token=judge[1],
            other=other,
            plain_other=self._other.get(True, p.plain_other),
        )
        for calibration in (*self._calibration.values(), *self._plain_calibration.values()):
            calibration.refit()

    def _predict_raw(self, step: tuple) -> float:
        """The uncalibrated seconds of a measured step (Calibration's rows)."""
        tokens, requests, draft_steps, draft_tokens, backlog_tokens, accepted, fresh_accepted = step
        model = self if fresh_accepted is None else self.reusing(fresh_accepted)
        return model._raw_step_time(tokens, requests, draft_steps, draft_tokens, None, backlog_tokens, accepted)

    def _prior_scale(self) -> float:
        """Measured over prior-predicted target forward time of the fitted steps (1 before any): the prior is a
        profile of relative costs (a draft step against a verify) whose absolute scale is the machine's."""
        p = self._prior
        weights = (p.verify_fixed, p.verify_extra, p.per_token, p.per_expert)
        columns = [sum(column) for column in zip(*(row for row, _ in self._verify_rows), strict=True)]  # per feature
        predicted = sum(w * c for w, c in zip(weights, columns, strict=False))  # no columns before any row
        measured = sum(y for _, y in self._verify_rows)
        return measured / predicted if predicted > 0 and measured > 0 else 1.0
