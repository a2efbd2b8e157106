"""`moe-serve`: Cascade's utility, made batch-aware with MoESD's expert cost, under a TPOT SLO (issue 4).

  e_r(K)   = 1 + Σ_{i<=K} Π_{j<=i} p_rj          expected tokens of request r (p from acceptance.AcceptanceTracker,
                                                  or the drafter's confidences once known, in `trim`); a request's
                                                  own p is an EMA with weight `acceptance_alpha` = 0.3 after its
                                                  first outcomes: a text turns predictable partway (NGRAM code at
                                                  batch 1, CPU engine: six rejected one-token guesses, then judged
                                                  drafts accepted 3 of 3 six times in a row; at weight 0.1 that
                                                  request first speculated at its 28th token of 32)
  T(K⃗)     = StepTimeModel: fixed + a·n + b·L·N(F) + draft,  n = Σ_r (K_r + 1),  N(F) = E(1-(1-k/E)^F) (MoESD)
             over F = B + (n - B)(1 - affinity) fresh routings, affinity learnt from measured unique experts per
             batch-size bucket (expert_routing.Routing) and split by outcome (an accepted draft routes like the
             target's own next token, a rejected one does not: expert_routing.SplitAffinity), the drafts expected
             accepted Σ_r (e_r - 1) taken from the same p,
             coefficients by non-negative least squares from measured steps; draft includes the draft model's
             catch-up over the context of a request that starts drafting (RequestView.draft_backlog), counted in
             each step as its share over the request's remaining life (tokens_left / e_r steps: it is paid once),
             in the allocation and in the SLO test; the probe gate (probing) counts it whole
  J(K⃗)     = T(K⃗) · mean_r 1/e_r(K_r)            the batch's mean TPOT for this step
  utility of one more draft token for r:   U_r = J(K⃗) / J(K⃗ + 1_r)
             = (ETR gain of r, as harmonic share) / (marginal step time it adds for the whole batch)
  rule     how K⃗ is chosen for a step (allocate: the depth search, the margin over K = 0, the verify layout):
           moe_serve_allocate.py's docstring.
  SLO      a TPOT target (the tightest in the batch, slo.step_time_cap) bounds the batch's mean expected time per
           token, J / B = T · mean_r 1/e_r: a TPOT SLO is a mean over a request's tokens, and speculation lowers it
           although a step takes longer. Minimising J meets the target whenever some configuration does; a probe
           must not push a batch over it, its one step's extra time counted spread over each request's whole life
           (tokens so far + left). Two stricter bounds fail in a real engine: AdaSpec's step cap T <= cap (as
           if every request got one token) forbids any speculation when the target is near plain-decode TPOT, and a
           per-step worst-off bound T / min_r e_r lets one request without a draft this step (e = 1) switch
           speculation off for the whole batch, though its own TPOT is a mean over its whole life.
  drafts   where the engine plans after drafting (RequestView.draft_depth set), K_r is capped at the depth of the
           draft in hand and p starts from acceptance learnt per draft depth across requests (a deep NGRAM match is
           accepted far more often than a one-token guess), moved toward the request's own measured acceptance as its
           outcomes come in (weight n / (n + 2) after n first-draft outcomes): requests with drafts of one depth
           differ (prose whose continuation the corpus predicts, arithmetic whose it does not). Outcomes come from
           its verifies and, while it runs at K = 0, from StepStats.shadow: the engine judges the draft it looked up
           but did not verify against the tokens emitted next (moe_sglang/shadow.py), so such a request never needs
           a probe. With `judged_first` (the default) it stays at K = 0 until one of its own drafts was accepted
           (judged or verified), a step or a few: the depth prior mixes requests whose drafts pay with requests whose
           drafts do not, and it is learnt mostly from later steps, while a request's first draft is looked up from
           its prompt's tail: in the engine's step log (NGRAM, moe-fine x48; code at batch 1, math at batch 8) all
           20 first steps of new requests that speculated on the depth prior (K = 1-4) had their first draft token
           rejected. Waiting for the first judgement alone was not enough: one rejection moved the request's own p
           to ~0.3 but weighs 1/3 against the depth prior (0.8-0.95 after code), and new code and math requests
           speculated at p ~ 0.4-0.7 on their second step, each such verify rejected (NGRAM, moe-fine x48, batch 1,
           2026-11-28: 24-33 ms against a 15 ms plain step). Where the engine plans before drafting, p is the
           request's own (it starts from the batch-wide prior).
  probing  a request kept at K = 0 for P steps runs a probe phase: `probe_steps` steps at K = `probe_k`
           (Cascade's K_start) that measure acceptance; P doubles each time a probe does not lead to speculation
           (Cascade's back-off) and resets to P0 when it does. A new request probes at once, for one step by
           default: acceptance differs between requests (moe-fine's dense draft verifies 2.9 tokens per step on
           prose, 1.5 on arithmetic), so acceptance learnt across requests says little about the next one: gated on
           it, a stream of arithmetic kept every later prose request from ever drafting. One step at K = 3 with
           the draft model's catch-up over a ~100-token prompt cost ~3 plain steps on the CPU engine's inflated
           moe-fine at batch 1 (~10 % of a 32-token request where drafts fail), while a request whose drafts pay
           gains 15-35 %; longer probes (4 steps) cost too much on short requests. The probes due in a step start
           together or are skipped together (the back-off goes on), where they cost more than speculating could
           return (`_probes_pay`): their ΔJ (verifies, draft steps, the draft model's catch-up over the whole
           context, which grows with the prompt) against the J per step that the group would save at the best depth
           were its drafts accepted at the hoped-for rate `probe_hope` (not the learnt mean: that one follows the
           workload, and after a stream of arithmetic no prose request would probe), for tokens_left / e steps.
           Drafting is batch-wide: a wave of new requests probes together, one new request among requests that do
           not speculate rarely pays for making them all wait for its drafts. After the probe, a request that did
           not speculate waits for the back-off interval other requests reached. A request whose draft is in hand
           (NGRAM) is never probed: the engine judges the draft it did not verify (drafts, above). Where the verify
           is rectangular the probe sets the batch's width, so every request drafts to it (no extra verify work).
  judging  where the engine can judge a drafter without a verify (BatchView.judging: moe-serve's STANDALONE runs its
           draft model over the request's committed tokens and compares each prediction with the token the target
           emitted, moe_sglang/draft_model.py), a request planned before drafting is never probed: once it has emitted
           `judge_after` tokens (moe_serve_probe.judge_after_of) it is judged (Decision.judge) where it could pay
           (`judgements_pay`: the draft model's catch-up over its context, which the whole batch waits for, against what
           speculating at the hoped-for acceptance could save over its remaining tokens; the first judgements due in a
           step run together or rest until the back-off interval comes round; `judge_gate` off: judged once due), the
           outcomes come back as StepStats.shadow and set its own acceptance, and while it stays at K = 0 it is judged
           again after `judge_after` steps, then twice as many each time (reset by a whole hit, judged_back_off), where
           speculating could pay at an optimistic bound on what it measured or were the tokens since all matched
           (`rejudging_could_pay`) (a judgement costs ~0.3 of a plain step at batch 1; at the probes' 16 steps a prose
           request whose first 4 tokens matched the draft half the time waited half its 32 tokens before the judgement
           that found 0.9). One that falls from speculating to K = 0 is judged again at its second step there
           (`rejudge_after`): after one rejected draft (p ~0.95 -> ~0.67, a tie with K = 0) prose requests rested 4
           plain steps before the judgement that brought them back (bench/results/gate-reuse-s50/prices-after.jsonl).
           With `judged_first` it does not speculate before its first judgement, for the reason given for drafts in hand
           (in a scratch cell, the second code request at batch 1 speculated at once on the acceptance the first one's
           judgement left, at K = 1-4 for its 15 steps, 1.17x of none's TPOT where the judged ones read 0.91-0.97x). A
           judgement costs one draft forward over what the draft cache lacks (which it then holds, so speculation that
           follows has no catch-up) and no verify: in the CPU engine's STANDALONE cells a probe (3 drafts verified, the
           catch-up) cost ~10 % of a 32-token request's TPOT (scratch cell, moe-fine x48: every request probed once and
           never speculated after, 1.10-1.13x of none's TPOT).
  scouting first judgements that do not pay together are a bet priced at the hoped-for rate, where what they buy is
           information: at batch 8 a wave's judgement (8 contexts caught up) costs about what drafts hoped at 0.8 would
           save, so small changes in the calibrated prices decided whether prose, whose drafts then proved 0.9-0.99,
           speculated at all (one round of three in the twenty-fourth session's runs). Where no request of the batch
           has measured its acceptance yet, the cheapest one of the group is judged alone where that costs less than
           the group's hoped gain and the others' judgements would pay were every draft accepted (`scout`); the
           others are weighed again the next step, at the hoped-for rate raised to what any request of the batch
           measured (`batch_hope`, an optimistic bound as for rejudging; only raised, since requests decoding
           together need not be alike). Costs are scouted too: a step the allocation keeps plain whose batch size has
           not calibrated speculative steps is priced again at their optimistic end (StepTimeModel.scouting), so a
           few speculative steps calibrate the bucket; at the batch-1 fit (1.35-1.6x the scout's price on AMX tiles)
           STANDALONE prose at batch 8 stayed plain, 1.02x of none's TPOT, 0.76x scouted
           (bench/results/prose-b8-s51).
  resting  a request at K = 0 that nothing in its next steps could move rests for them (Decision.rest_until): the
           engine keeps it at K = 0 without showing it to a policy as a request that may draft, and a batch of
           resting requests takes the plain step that asks no policy at all. A judged request (STANDALONE) at K = 0
           rests until its next judgement is due (at most `max_rest` steps at a time after its first); one whose
           draft is in hand (NGRAM) rests while its first draft is judged, where its latest judged draft was not
           accepted to its end (or its latest verified one was rejected), or where a full-depth draft could not pay
           at an optimistic bound on its measured acceptance (rejudging_could_pay's), for 3, 7, 15 steps (up to
           `max_rest`: with the step that starts it, whole plain bursts of the engine's, BatchView.plain_burst, here
           4; backed_off), the back-off reset by a draft accepted to its end, which also ends a rest: the engine
           judges a resting request's free draft, so rests may be long (16); in a batch they end together
           (align_rests, join_rests). What rests measured on the CPU engine: moe_serve_probe.rests.
  reuse    accepted drafts are priced at the expert reuse the requests' own plain-decoded tokens measured, not the
           bucket's split, which mixes requests (moe_serve_observe.fresh_accepted); the gates at an optimistic
           bound on it (hoped_gain).
  own cost at batch 1 a request's speculative steps are priced by the ratio its own such steps measured against
           their prices (moe_serve_observe.own_ratio).
  stop     a drafter that drafts depth by depth stops a request's chain at its first draft its acceptance head gives
           below `accept_stop`, or without a head below `draft_stop` times the runner-up's probability (Decision's,
           draft_stop.py); K is the allocation's cap. Chains gated by a head (BatchView.gated) skip `judged_first`.
Small batch on a sparse MoE: every draft token hits new experts, so U_r < 1 unless p is high. Moderate batch: the
experts are already loaded (N(n) saturates), so the marginal cost is small and K grows.
"""

from __future__ import annotations

from service.policy.acceptance import AcceptanceTracker
from service.policy.base import plan
from service.policy.cost_model import StepTimeModel
from service.policy.moe_serve_allocate import allocate, chains_of, objective, step_time
from service.policy.moe_serve_observe import drafted_probs, observe, priced_for
from service.policy.moe_serve_probe import (
    JUDGE_AFTER,
    batch_hope,
    judge_after_of,
    judge_due,
    judged_now,
    judgements_pay,
    probe_breaks_slo,
    probes_pay,
    rejudging_could_pay,
    rests,
    scout,
)
from service.policy.moe_serve_terms import life_cap
from service.policy.moe_serve_trim import trim_to_confidences
from service.policy.slo import step_time_cap
from service.policy.step_coefficients import MoeShape, StepCoefficients
from service.policy.types import BatchView, Decision

# seconds: a rough small-GPU profile; the fit replaces it within a few dozen steps
DEFAULT_PRIOR = StepCoefficients(
    verify_fixed=4e-3, per_token=5e-5, per_expert=5e-5, per_draft_step=1e-3, per_draft_token=2e-5, other=5e-4,
    per_backlog_token=2e-5,
)  # fmt: skip

# the policy's state kept per request (dicts and sets keyed by request id), forgotten when requests leave (decide)
PER_REQUEST = (
    *("_idle", "_interval", "_probe_left", "_depth", "_shadowed", "_proven", "_judged", "_unjudged", "_awaiting"),
    *("_reuse", "_own", "_own_memo", "_rest_until", "_rest_len", "_hit"),
)


class MoeServePolicy:
    def __init__(
        self,
        num_experts: int = 64,
        top_k: int = 8,
        num_layers: int = 16,
        k_max: int = 7,
        prior: StepCoefficients = DEFAULT_PRIOR,
        expert_budget: int | None = None,
        probe_every: int = 16,
        max_probe_every: int = 1024,
        probe_steps: int = 1,
        probe_k: int = 3,
        probe_new_requests: bool = True,
        refit_every: int = 16,
        acceptance_prior: float = 0.5,
        acceptance_alpha: float = 0.3,
        acceptance_prior_weight: float = 2.0,
        judged_first: bool = True,
        warm_up: bool = True,
        probe_hope: float = 0.8,
        judge_after: int | None = None,
        judge_gate: bool = True,
        max_rest: int = 16,
        rejudge_after: int = 2,
        draft_stop: float = 1.1,
        accept_stop: float = 0.6,
    ) -> None:
        if (
            k_max < 0 or probe_every < 1 or max_probe_every < probe_every or refit_every < 1
            or min(probe_steps, probe_k) < 1 or not 0.0 < probe_hope <= 1.0 or max_rest < 0
            or min(JUDGE_AFTER if judge_after is None else judge_after, rejudge_after) < 1
            or (draft_stop != 0 and draft_stop < 1) or not 0 <= accept_stop < 1
        ):  # fmt: skip
            raise ValueError(
                "moe-serve: need k_max >= 0, 1 <= probe_every <= max_probe_every, refit_every >= 1, "
                "probe_steps, probe_k >= 1, 0 < probe_hope <= 1, judge_after, rejudge_after >= 1, max_rest >= 0, "
                "draft_stop 0 or >= 1, 0 <= accept_stop < 1"
            )
        if expert_budget is not None and not top_k <= expert_budget <= num_experts:
            raise ValueError(f"expert budget must be in [top_k, num_experts], got {expert_budget}")
        self.shape = MoeShape(num_experts, top_k, num_layers)
        self.k_max, self.expert_budget = k_max, expert_budget
        self.model = StepTimeModel(self.shape, prior)
        # a request's own acceptance weighs its recent outcomes (`acceptance_alpha`, an EMA once its first outcomes
        # are in, a mean before with the prior as `acceptance_prior_weight` of them): texts turn predictable partway
        self.accept = AcceptanceTracker(
            max(k_max, 1), prior=acceptance_prior, alpha=acceptance_alpha, prior_weight=acceptance_prior_weight
        )
        # acceptance by the depth of the draft in hand (engines that plan after drafting), learnt across requests:
        # how far the drafter's match reaches predicts acceptance better than the request's past
        self.by_depth = AcceptanceTracker(max(k_max, 1), prior=acceptance_prior)
        self._depth: dict[str, int] = {}  # request -> draft depth at its latest decision
        self.judged_first = judged_first  # a request with its draft in hand waits for its own first outcome
        self.probe_every, self.max_probe_every, self.refit_every = probe_every, max_probe_every, refit_every
        # a plain first step, refits after WARM_UP_REFITS steps too (off: decisions on the prior until refit_every)
        self.warm_up = warm_up
        self.probe_steps, self.probe_k, self.probe_new_requests = probe_steps, probe_k, probe_new_requests
        self.probe_hope = probe_hope  # acceptance a probe hopes to find (_probes_pay)
        self._idle: dict[str, int] = {}  # request -> consecutive steps at K = 0
        self._interval: dict[str, int] = {}  # request -> current probe interval P, steps
        self._probe_left: dict[str, int] = {}  # request -> steps left in its probe phase
        self._probing: set[str] = set()  # requests whose K this step is a probe
        self._carried = probe_every  # probe interval a new request starts from once the prior is learnt
        self._shadowed: set[str] = set()  # requests whose acceptance the engine measures from drafts in hand
        self._proven: set[str] = set()  # requests one of whose own drafts was accepted (verified or judged)
        self._judged: set[str] = set()  # requests whose first judgement came due (judged, or declined: _unjudged)
        self._unjudged: set[str] = set()  # requests whose first judgement was due and did not pay (judgements_pay)
        self._awaiting: set[str] = set()  # requests whose first judgement is weighed again after a scout's (scout)
        self._judge_after, self._beside = judge_after, False  # `judge_after` (None: as BatchView.judge_beside)
        self.rejudge_after = rejudge_after  # steps at K = 0 after a speculative step until it is judged (judging)
        # first judgements only where they could pay (judgements_pay); off: every request is judged once due, its
        # acceptance measured whatever that costs (acceptance statistics on an engine where speculation cannot pay)
        self.judge_gate = judge_gate
        self.max_rest = max_rest  # most steps a request rests at once (resting); 0: none rests
        self._rest_until: dict[str, int] = {}  # request -> tokens_so_far at which its rest ends (Decision.rest_until)
        self._rest_len: dict[str, int] = {}  # NGRAM request -> its latest rest, forwards with its first (back-off)
        self._hit: dict[str, bool] = {}  # request -> its latest verified draft had a hit / judged one was whole
        self._reuse: dict[str, tuple[float, int]] = {}  # request -> (its expert reuse, plain steps): `_priced_for`
        self._own: dict[str, tuple[tuple, ...]] = {}  # request -> its latest batch-1 speculative steps (own cost)
        self._own_memo: dict[str, tuple[int, float]] = {}  # request -> (step, its own cost ratio then)
        self._steps = 0
        self.draft_stop, self.accept_stop = draft_stop, accept_stop  # Decision's, of its speculative steps (stop)

    def decide(self, batch: BatchView) -> Decision:
        reqs = batch.requests
        if len(self.accept) > 2 * len(reqs) + 16:
            live = {r.request_id for r in reqs}
            self.accept.keep_only(live)
            for name in PER_REQUEST:  # requests that left the batch are forgotten
                kept = getattr(self, name)
                setattr(self, name, kept & live if isinstance(kept, set) else {k: kept[k] for k in kept if k in live})
        if self.warm_up and self._steps == 0:
            # nothing measured yet: the prior is a GPU's (on the CPU engine it priced a first step of 8 requests at
            # K = 2 at 31 ms; it took 325), so the first step is a plain one, which measures the machine
            return plan(batch, [0] * len(reqs), self._budget())
        k_cap, self._beside = min(self.k_max, batch.max_k), batch.judge_beside
        resting = [r.tokens_so_far < self._rest_until.get(r.request_id, 0) for r in reqs]
        probs, caps = [], []
        waits = batch.judging and self.judged_first and not (batch.gated and self.accept_stop > 0)  # (stop)
        for r, asleep in zip(reqs, resting, strict=True):
            if asleep:  # K = 0 until its rest ends, nothing weighed (resting)
                probs.append([0.0] * max(self.k_max, 1))
                caps.append(0)
            elif r.draft_depth is None:
                p = self.accept.get(r.request_id)
                unjudged = waits and self.accept.observed(r.request_id) == 0
                probs.append([0.0] * len(p) if unjudged else p)  # judged_first: its own judgement first
                caps.append(life_cap(k_cap, r))
            else:
                self._depth[r.request_id] = r.draft_depth
                probs.append(self._drafted_probs(r.request_id, r.draft_depth))
                caps.append(life_cap(min(k_cap, r.draft_depth), r))
        # nothing to draft (no NGRAM match, every request capped) or no draft that could be accepted (every request
        # unjudged, or judged at p = 0): no pricing. A p = 0 draft only adds time, but calibrated prices can put a
        # one-draft step at a plain one's (StepTimeModel._plain_price; STANDALONE code, moe-fine x48, batch 1: plain
        # steps priced 26.4 ms after a burst of load, 22-23 ms measured after it), and pricing every K took ~0.06 ms
        # of an unjudged batch-1 request's 0.066 ms decide() (scratch timing of decide() alone, best of 5)
        chosen = [0] * len(caps)
        if any(c > 0 and p[0] > 0.0 for p, c in zip(probs, caps, strict=True)):
            chosen = self.allocate(probs, caps, step_time_cap(batch), drafting=True, layout=batch)
            scout_due = len(reqs) > 1 and not any(chosen) and not self.model.calibrated(len(reqs))
            if scout_due:  # scouting (docstring)
                scout = self._priced_for(reqs).scouting()
                chosen = self.allocate(probs, caps, step_time_cap(batch), drafting=True, layout=batch, model=scout)
        ks = list(chosen)
        self._probing = set()
        starting: list[int] = []  # requests whose probe phase is due to start this step (decided jointly below)
        judge: set[str] = set()  # requests whose drafter the engine judges without a verify (judging)
        first_due: list[int] = []  # requests whose first judgement is due this step (judgements_pay)
        waiting: list[int] = []  # requests at K = 0 that may rest until they are weighed again (resting)
        for i, r in enumerate(reqs):
            rid = r.request_id
            if resting[i]:
                continue
            new = rid not in self._interval
            learnt = (self.accept if r.draft_depth is None else self.by_depth).prior_trusted()
            interval = self._interval.setdefault(rid, self._carried if learnt else self.probe_every)
            judged = batch.judging and r.draft_depth is None
            if ks[i] > 0:
                self._idle[rid], self._interval[rid] = 0, self.rejudge_after if judged else self.probe_every
                self._probe_left.pop(rid, None)
                self._rest_len.pop(rid, None)
                self._carried = self.probe_every  # speculation pays again: the back-off is over
                continue
            if rid in self._shadowed or (r.draft_depth and self.judged_first and rid not in self._proven):
                waiting.append(i)
                continue  # its acceptance is measured without drafting for it (its first draft's too): no probe
            if judged:
                first = rid not in self._judged or rid in self._unjudged
                awaiting = rid in self._awaiting  # a scout was judged last step: weighed again at once
                self._awaiting.discard(rid)
                due = caps[i] > 0 and (awaiting or self._judge_due(rid, r.tokens_so_far, interval))
                if due and first:
                    first_due.append(i)  # judged together or not at all, below
                elif due and self._rejudging_could_pay(i, probs, caps, batch):
                    judge.add(rid)
                elif caps[i] > 0 and not awaiting:
                    waiting.append(i)
                continue
            left = self._probe_left.get(rid, 0)
            if left == 0:
                # a new request probes at once (unless probe_new_requests is off); one whose draft is in hand
                # (draft_depth) is judged by the engine instead
                at_once = new and self.probe_new_requests and r.draft_depth is None
                idle = self._idle.get(rid, interval - 1 if at_once else 0) + 1
                self._idle[rid] = idle
                if idle < interval or caps[i] == 0:
                    continue
                self._idle[rid] = 0
                self._interval[rid] = min(2 * interval, self.max_probe_every)
                self._carried = max(self._carried, self._interval[rid])
                starting.append(i)
                continue
            if caps[i] == 0:
                continue  # nothing drafted to probe with this step: the phase waits for a draft
            ks[i] = min(self.probe_k, caps[i])
            self._probe_left[rid] = left - 1
            self._probing.add(rid)
        # first judgements due this step run together (one draft forward) where they could pay at what the batch
        # hopes for, else one of them may scout for the others (weighed again next step, on what it measured), and
        # the rest wait for the back-off interval and are weighed again then
        if first_due:
            rids = {reqs[i].request_id for i in first_due}
            if not self.judge_gate or self._judgements_pay(first_due, ks, probs, caps, batch, self._batch_hope(batch)):
                judge |= rids
                self._unjudged -= rids
                self._judged_now(rids)
            else:
                self._unjudged |= rids
                sent = self._scout(first_due, ks, probs, caps, batch)
                if sent is not None:
                    sid = reqs[sent].request_id
                    judge.add(sid)
                    self._unjudged.discard(sid)
                    self._judged_now({sid})
                    self._awaiting |= rids - {sid}
                else:  # nothing this step can change before the interval comes round: they rest until then
                    waiting.extend(first_due)
        # the probes due this step start together or not at all (the back-off goes on): drafting is batch-wide, so
        # what one probe costs and what speculating could return depend on who else drafts
        if starting and self._probes_pay(starting, ks, probs, caps, batch):
            for i in starting:
                ks[i] = min(self.probe_k, caps[i])
                self._probe_left[reqs[i].request_id] = self.probe_steps - 1
                self._probing.add(reqs[i].request_id)
        if self._probing and batch.verify_layout != "ragged":
            # a probe sets the verify width of the whole batch: drafts up to it cost the others no verify work
            ks = [max(ks)] * len(ks)
        if self._probing and self._probe_breaks_slo(ks, chosen, probs, batch):
            ks, self._probing = chosen, set()  # a probe must not push the batch over its TPOT target
        rests = self._rests(waiting, ks, probs, caps, k_cap, batch)
        return plan(batch, ks, self._budget(), frozenset(judge), rests, self.draft_stop, self.accept_stop)

    _judged_now = judged_now
    _probe_breaks_slo = probe_breaks_slo
    _probes_pay = probes_pay
    _judge_due = judge_due
    _judgements_pay = judgements_pay
    _rejudging_could_pay = rejudging_could_pay
    _batch_hope = batch_hope
    _scout = scout
    _rests = rests
    judge_after = property(judge_after_of)
    _chains = staticmethod(chains_of)
    trim = trim_to_confidences
    allocate = allocate
    _objective = objective
    _time = step_time

    def _budget(self) -> tuple[int, ...] | None:
        return None if self.expert_budget is None else (self.expert_budget,) * self.shape.num_layers

    observe = observe
    _drafted_probs = drafted_probs
    _priced_for = priced_for
