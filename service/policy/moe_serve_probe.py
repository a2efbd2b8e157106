"""moe-serve's probe gate (moe_serve.py's docstring, probing): whether the probes due in a step pay for themselves, and
whether they would push the batch over its TPOT target; and when a request's drafter is judged instead (judging),
first judgements gated the same way (judgements_pay).
Methods of MoeServePolicy, kept apart by idea."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from service.policy.moe_serve_terms import life_cap
from service.policy.slo import step_time_cap
from service.policy.types import BatchView

if TYPE_CHECKING:
    from service.policy.moe_serve import MoeServePolicy


def probe_breaks_slo(
    self: MoeServePolicy, ks: list[int], chosen: list[int], probs: list[list[float]], batch: BatchView
) -> bool:
    """Whether this step's probes push the batch over its TPOT target where the allocation alone does not. A
    probe is one step: its extra time counts spread over each request's whole life (tokens so far + left), as
    the SLO is a mean over a request's tokens; counted in the one step (as if every token cost what it does), a
    probe at a target near plain decoding's TPOT never passed, and prose at batch 1 never learnt that its drafts
    pay. Where a request's length is unknown, the probe step itself must stay within the target."""
    cap = step_time_cap(batch)
    over, j = self._objective(chosen, self._chains(probs, chosen), cap, True, batch)
    if over:
        return False  # over anyway: the probe does not decide it
    if any(r.tokens_left is None for r in batch.requests):
        return self._objective(ks, self._chains(probs, ks), cap, True, batch)[0] == 1
    extra = self._time(ks, True, batch, self._chains(probs, ks), False) - self._time(
        chosen, True, batch, self._chains(probs, chosen), False
    )
    spread = sum(extra / max(r.tokens_so_far + r.tokens_left, 1) for r in batch.requests)
    return j + spread > cap * len(ks)


def probes_pay(
    self: MoeServePolicy, group: list[int], ks: list[int], probs: list[list[float]], caps: list[int], batch: BatchView
) -> bool:
    """Whether the probes of `group` (batch indices) are worth their cost (module docstring, probing): the time the
    probe step adds (their verifies, the draft steps, the draft model's catch-up over their contexts, whole), which
    every request of the batch waits for, against what speculating would save over their remaining tokens were
    their drafts accepted at the hoped-for rate (`probe_hope`): `hoped_gain`, priced by the cost model (steps grow
    with d: at batch 1 a 4-token verify costs 1.5-2.5x a plain step on the CPU engine; accepted drafts at the
    target's own routing until that is measured, StepTimeModel.hoped: priced at the single affinity no probe at
    batch 1 ever passed, so nothing measured it), catch-ups already paid. Both in request-seconds; the tokens the
    probe step itself may gain are not counted. Not the request's own or the learnt mean acceptance: a stream of
    arithmetic drives that toward 0 and a later prose request would never learn that its drafts pay (seen:
    STANDALONE prose at batch 8 after code and math, p = 0.15 for every request, no probe, 1.00x of none where
    static K = 3 read 0.58x). Not weighted by how often probes paid: that share mixes workloads too."""
    reqs = batch.requests
    if any(reqs[i].tokens_left is None for i in group):
        return True
    k = min(self.probe_k, batch.max_k)
    trial = list(ks)
    for i in group:
        trial[i] = max(trial[i], min(k, caps[i]))
    extra = self._time(trial, True, batch, self._chains(probs, trial), False) - self._time(
        ks, True, batch, self._chains(probs, ks), False
    )
    return extra * len(reqs) <= hoped_gain(self, group, ks, probs, caps, batch)


def hoped_gain(
    self: MoeServePolicy,
    group: list[int],
    ks: list[int],
    probs: list[list[float]],
    caps: list[int],
    batch: BatchView,
    hope: list[float] | None = None,
) -> float:
    """What speculating would save over the remaining tokens of `group` (batch indices, every tokens_left known)
    were their drafts accepted at the hoped-for rate (`probe_hope`, or per draft position `hope`: batch_hope), the
    draft model caught up with them, in request-seconds: J (a sum of the requests' times per token) at the best
    depth d <= probe_k against J(ks), priced by the cost model with accepted drafts at the target's own routing
    until measured (StepTimeModel.hoped), then at Wilson's upper bound (`_upper`) on the expert reuse the requests
    measured over their plain steps, an optimistic bound as the acceptance is, and speculative steps of a batch size
    not yet calibrated at their optimistic end (StepTimeModel.scouting, as the allocation's cost scout), times the
    group's mean tokens_left (probes_pay, judgements_pay). At the batch-1 fit, where a batch size's plain steps
    measured 0.63-0.74x it, the gates of STANDALONE prose waves at batch 8 read no gain at all once code and
    arithmetic waves had calibrated those plain steps, and prose stayed plain there (1.06x of none's TPOT, static-4
    0.74x: CPU engine, moe-fine x48 on AMX tiles, bench/results/prose-b8-s51). At its mean reuse, a first
    judgement after 3 plain steps priced accepted drafts at what a request's first tokens reused, a mean over three
    (CPU engine, STANDALONE, moe-fine x48, Intel Xeon, fiftieth session: 0.42-0.94 on prose, rising to 0.83 by the
    17th token for one at 0.42), and prose requests whose gates declined on it kept to K = 0 until a later gate, or
    to the end (prose b1 1.01x of none's TPOT, 0.78x with the bound, static K = 4 0.64-0.71x;
    bench/results/gate-reuse-s50). Counted per step (tokens_left / e steps) it was e times too small: in the CPU
    engine's STANDALONE cells (moe-fine x48) only the very first wave's first judgements at batch 8 passed (2
    batch-8 plain steps calibrated then; 8 requests' ~100-token contexts, ~40 ms, against 0.8-hoped drafts over 28
    tokens each), and prose at batch 8 never speculated: 1.12-1.14x of none's TPOT where static K = 3 read 0.82x."""
    reqs = batch.requests
    k = min(self.probe_k, batch.max_k)
    whole = float("inf")
    members = set(group)
    paid = replace(  # after the probe or judgement the draft model has caught up with the group
        batch, requests=tuple(replace(r, draft_backlog=0) if i in members else r for i, r in enumerate(reqs))
    )
    now = self._objective(ks, self._chains(probs, ks), whole, True, paid)[1]
    # accepted drafts at the target's own routing until measured, then at an optimistic bound on the reuse measured;
    # a batch size whose speculative steps are not calibrated, at their optimistic end (the cost scout)
    hoped_model = self._priced_for(reqs, _upper).hoped().scouting()
    tokens_left = sum(reqs[i].tokens_left for i in group) / len(group)
    gain = 0.0
    for depth in range(1, k + 1):
        hoped = [list(p) for p in probs]
        spec = list(ks)
        for i in group:
            spec[i] = max(spec[i], min(depth, caps[i]))
            hoped[i] = [self.probe_hope] * spec[i] if hope is None else list(hope[: spec[i]])
        after = self._objective(spec, self._chains(hoped, spec), whole, True, paid, model=hoped_model)[1]
        gain = max(gain, (now - after) * tokens_left)
    return gain


def judgements_pay(
    self: MoeServePolicy,
    group: list[int],
    ks: list[int],
    probs: list[list[float]],
    caps: list[int],
    batch: BatchView,
    hope: list[float] | None = None,
) -> bool:
    """Whether the first judgements due this step (`group`, batch indices) could pay for themselves (moe_serve.py's
    docstring, judging): their cost is one draft forward over what the draft cache lacks of their contexts (prompt
    and tokens so far, StepTimeModel's per-draft-step and per-catch-up-token costs), which every request of the
    batch waits for (J grows by that time per request), against `hoped_gain`, what speculating would save were
    their drafts accepted at `probe_hope`. A judgement only informs: where speculation could not pay even at that
    rate (a large batch whose verifies cost more than hoped drafts return, or a long prompt before a short
    answer), it is pure cost; in the CPU engine's STANDALONE replay (moe-fine x48, 10 requests of 226-token
    prompts and 24-token answers decoding together) moe-serve's TPOT read 1.13x of the plain synchronous engine's
    where no static K paid (static-3 1.25x), each request's first judgement running the draft model over its
    ~230-token context. Unknown remaining lengths: judged (nothing to weigh). `hope`: batch_hope."""
    reqs = batch.requests
    if any(reqs[i].tokens_left is None for i in group):
        return True
    return judgement_cost(self, group, batch) <= hoped_gain(self, group, ks, probs, caps, batch, hope)


def judgement_cost(self: MoeServePolicy, group: list[int], batch: BatchView) -> float:
    """What judging `group` (batch indices) costs in request-seconds: one draft forward over what the draft cache
    lacks of their contexts (StepTimeModel.judgement_time), which every request of the batch waits for."""
    catch_up = sum(batch.requests[i].draft_backlog for i in group)
    return self.model.judgement_time(catch_up) * len(batch.requests)


def batch_hope(self: MoeServePolicy, batch: BatchView) -> list[float]:
    """The acceptance first judgements hope to find, per draft position (scouting, moe_serve.py's docstring): the
    hoped-for rate `probe_hope`, raised where a request of the batch has measured more (its own acceptance at an
    optimistic bound, `_upper`, as rejudging_could_pay asks it). Only raised: requests that decode together are
    often alike (a wave of one task), but not always, and a scout whose drafts failed must not keep a neighbour
    whose drafts would pay from being judged at the hoped-for rate."""
    hope = [self.probe_hope] * max(self.probe_k, 1)
    for r in batch.requests:
        n = self.accept.observed(r.request_id)
        if n > 0:
            measured = self.accept.get(r.request_id)
            hope = [max(h, _upper(measured[min(j, len(measured) - 1)], n)) for j, h in enumerate(hope)]
    return hope


def scout(
    self: MoeServePolicy, group: list[int], ks: list[int], probs: list[list[float]], caps: list[int], batch: BatchView
) -> int | None:
    """The request of `group` (first judgements due that did not pay together) to judge alone (scouting,
    moe_serve.py's docstring), or None: the one whose judgement costs least (the shortest catch-up; then the most
    tokens left), where no request of the batch has measured its acceptance yet, its judgement costs less than
    what the group's speculating would save at the hoped-for rate (what the scout may find is worth that much to
    the group), and what it finds could lead the others to be judged (their judgements would pay were every draft
    accepted; a group of one has no others: its judgement alone was just weighed). On the CPU engine's STANDALONE
    cells (moe-fine x48, batch 8, AVX-512 host) the first judgements of a wave of 8 ~100-token contexts cost ~40
    ms, near what drafts hoped at 0.8 would save there, and prose, whose drafts were then accepted at 0.9-0.99,
    speculated in one round of three; one request's judgement costs ~7 ms."""
    if any(self.accept.observed(r.request_id) > 0 for r in batch.requests):
        return None
    reqs = batch.requests
    known = [i for i in group if reqs[i].tokens_left is not None]
    if len(known) < 2:
        return None
    best = min(known, key=lambda i: (reqs[i].draft_backlog, -reqs[i].tokens_left))
    if judgement_cost(self, [best], batch) > hoped_gain(self, known, ks, probs, caps, batch):
        return None
    others = [i for i in known if i != best]
    if not judgements_pay(self, others, ks, probs, caps, batch, [1.0] * max(self.probe_k, 1)):
        return None
    return best


def rejudging_could_pay(
    self: MoeServePolicy, i: int, probs: list[list[float]], caps: list[int], batch: BatchView
) -> bool:
    """Whether judging request `i` again (it was judged, it is at K = 0) could change the decision: the allocation is
    asked with its acceptance at the higher of an optimistic bound on what it measured (`_upper`) and what it would read
    were every token the judgement would judge (those its draft cache lacks, RequestView.draft_backlog) matched
    (AcceptanceTracker.if_matched, chains of the batch's deepest draft). Else a judgement only costs (5-6 ms at batch 1
    on moe-fine x48; requests that never speculated read 1.05-1.08x of none's TPOT, 1.01-1.05x at K = 0). The bound
    alone does not grow while a request waits: prose requests whose first two judged tokens were rejected (p ~0.2 from a
    prior of 0.9) ran all 31 tokens plain where those judged again speculated (judge-root-s68/run4-reset)."""
    r = batch.requests[i]
    bound = [_upper(p, self.accept.observed(r.request_id)) for p in self.accept.get(r.request_id)]
    matched = self.accept.if_matched(r.request_id, r.draft_backlog, max(min(self.k_max, batch.max_k), 1))
    trial = list(probs)
    trial[i] = [max(a, b) for a, b in zip(bound, matched, strict=True)]
    return self.allocate(trial, caps, step_time_cap(batch), drafting=True, layout=batch)[i] > 0


def _upper(p: float, n: float, z: float = 1.0) -> float:
    """Wilson's upper bound on a rate measured as p over n outcomes (z = 1: one-sided ~84 %); 1 when n = 0."""
    if n <= 0:
        return 1.0
    zz = z * z / n
    return min((p + zz / 2 + z * (p * (1 - p) / n + zz / (4 * n)) ** 0.5) / (1 + zz), 1.0)


# tokens a request emits before its first judgement, and steps at K = 0 before it is judged again (judge_due), where
# a judgement costs the step its draft forward: at 2, without the draft thread, moe-serve's six-cell mean TPOT on the
# CPU engine (STANDALONE, moe-fine x48, a Zen 5 host) read 1.052 of none's against 1.031-1.041 at 4, prose at batch 1
# 0.96 against 0.90-0.92 (bench/results/standalone-b1-s56/ab/cmp.txt)
JUDGE_AFTER = 4
# where it runs beside the target's forward (BatchView.judge_beside): with the draft thread, 2 read moe-serve's
# six-cell mean 0.895-0.915 of none's TPOT against 0.921-0.952 at 4 (prose at batch 1 0.65-0.74 against 0.82-0.89,
# its requests speculating two tokens sooner; code at batch 1 1.02-1.05 against 0.98-1.02, worst cells alike:
# bench/results/judge-after-s57, Intel Xeon with AMX); on an AVX2-only EPYC the two read alike (means 1.000-1.054
# against 0.967-1.060, bench/results/judge-beside-s58)
JUDGE_AFTER_BESIDE = 2


def judge_after_of(self: MoeServePolicy) -> int:
    """`judge_after` as set, else by where the engine runs judgements (BatchView.judge_beside, the latest batch's)."""
    if self._judge_after is not None:
        return self._judge_after
    return JUDGE_AFTER_BESIDE if self._beside else JUDGE_AFTER


def judge_due(self: MoeServePolicy, rid: str, tokens_so_far: int, interval: int) -> bool:
    """Whether a request at K = 0 has its drafter judged this step (moe_serve.py docstring, judging): first once it
    has emitted `judge_after` tokens, then after `judge_after` steps at K = 0, the interval doubling each time (a
    judgement due again is skipped where it could not pay, `rejudging_could_pay`; the interval doubles anyway)."""
    if rid not in self._judged:
        if tokens_so_far < self.judge_after:
            return False
        self._judged.add(rid)
        self._idle[rid], self._interval[rid] = 0, self.judge_after
        return True
    idle = self._idle[rid] = self._idle.get(rid, 0) + 1
    if idle < interval:
        return False
    self._idle[rid] = 0
    self._interval[rid] = min(2 * interval, self.max_probe_every)
    return True


def judged_now(self: MoeServePolicy, rids: set[str]) -> None:
    """Requests whose first judgement runs this step are judged again `judge_after` steps on: the back-off their
    declined first gates built up (judge_due doubles the interval at each) was the gate's, and their drafts are
    measured from now (in the CPU engine's STANDALONE prose cell at batch 1, moe-fine x48, the first request's gate
    passed at its 17th token after two declines, measured p = 0.69, and it rested 16 steps, to its end:
    bench/results/gate-reuse-s50/prices-after.jsonl)."""
    for rid in rids:
        self._idle[rid], self._interval[rid] = 0, self.judge_after


def rests(
    self: MoeServePolicy,
    waiting: list[int],
    ks: list[int],
    probs: list[list[float]],
    caps: list[int],
    k_cap: int,
    batch: BatchView,
) -> tuple[int, ...]:
    """Decision.rest_until (moe_serve.py's docstring, resting): of the requests `waiting` at K = 0 this step, those
    whose next steps nothing would change rest. A request judged by the engine (STANDALONE) rests until its next
    judgement is due (after its first judgement at most `max_rest` steps at a time): at K = 0 nothing about its
    drafts is measured between judgements, where its drafts could pay at an optimistic bound too (in the CPU engine's
    STANDALONE prose cells, moe-fine x48 batch 1, such requests took single plain steps between judgements, 10 of
    a 31-token request's, where resting bursts them); its back-off counter moves on by the steps it rests. A
    request whose draft is in hand (NGRAM) rests while its first draft is judged (`judged_first`: K = 0 until then),
    where its latest judged or verified draft was rejected, or where its drafts could not pay at an optimistic bound
    on its measured acceptance with a draft of full depth, for `backed_off` steps, the back-off reset by a draft
    accepted to its end or a step where it stays awake; in a batch they end together (`align_rests`, `join_rests`).
    A first step awake cost a one-forward scheduler step (NGRAM math b1: 27 per 93 tokens, 24 at K = 0), and
    measured on the CPU engine (NGRAM, moe-fine x48) without rests such a request paid its lookup, judgement and
    the policy every step, each a scheduler step of its own (math at batch 1: 1.04-1.06x the K = 0 hint's TPOT in
    the thirty-third session; what judging during rests measured: moe_sglang/ngram_worker.py, _timed_lookup).
    Awake while either condition held (a rejected draft whose acceptance could still pay at the bound, which a few
    outcomes leave loose), prose at batch 1 took 52-61 scheduler steps for 93 tokens against 24 at a K = 0 hint,
    ~1 ms of the scheduler's own time and ~0.8 of lookup and policy each (forty-sixth session,
    bench/results/awake-s46)."""
    if self.max_rest == 0 or (not waiting and not self._rest_until):
        return ()
    reqs = batch.requests
    started: dict[str, int] = {}  # requests with their draft in hand that start a rest this step -> its steps
    declined: list[int] = []  # requests with their draft in hand at K = 0 whose drafts could pay: not resting
    for i in waiting:
        r = reqs[i]
        rid = r.request_id
        if ks[i] > 0:
            continue
        if r.draft_depth is None:  # judged by the engine: rests until its next judgement is due
            if rid not in self._judged:
                if not self.judged_first or self.accept.observed(rid) > 0:
                    continue
                steps = in_bursts(self.judge_after - r.tokens_so_far - 1, batch.plain_burst, self.max_rest)
            else:  # nothing measured between its judgements: its K stays 0 until the next one, where it could pay too
                steps = self._interval[rid] - self._idle.get(rid, 0) - 1
                steps = in_bursts(min(steps, self.max_rest), batch.plain_burst, self.max_rest)
                self._idle[rid] = self._idle.get(rid, 0) + max(steps, 0)
        else:
            if rid in self._shadowed and self._hit.get(rid, True) and could_pay(self, i, probs, caps, k_cap, batch):
                self._rest_len.pop(rid, None)
                declined.append(i)
                continue
            forwards = backed_off(self._rest_len.get(rid, 0), batch.plain_burst, self.max_rest)
            self._rest_len[rid] = forwards if rid in self._shadowed else 0  # a first draft's rest is no back-off
            steps = started[rid] = forwards - 1
        if steps > 0:
            self._rest_until[rid] = r.tokens_so_far + 1 + steps
    if started and len(reqs) > 1:
        align_rests(self, started, reqs)
    if declined and len(reqs) > 1:
        join_rests(self, declined, reqs)
    until = tuple(
        u if r.tokens_so_far < u else 0 for r, u in ((r, self._rest_until.get(r.request_id, 0)) for r in reqs)
    )
    return until if any(until) else ()


def backed_off(latest: int, burst: int, max_rest: int) -> int:
    """Forwards of a rest that starts this step, this one included (resting): twice the `latest` (0: none yet), at
    least 2 and a whole plain burst, at most max_rest + 1, in whole bursts where max_rest allows one. The engine runs a
    resting batch in bursts that end where a rest does (moe_sglang/plain_burst.py), so rests of 1, 2, 4, 8 steps
    after the waking one cost a scheduler step each for a part of a burst: in the CPU engine's NGRAM math at batch 1
    (moe-fine x48, bursts of 4) 35 scheduler steps for 93 forwards against 24 at a K = 0 hint."""
    return min(max(2 * latest, 2, burst), _whole(burst, max_rest))


def in_bursts(steps: int, burst: int, max_rest: int) -> int:
    """A judged request's rest of `steps` (resting) lengthened so that with the step that starts it, it is whole
    plain bursts, within max_rest: its next judgement comes up to burst - 1 steps later. Rests of 2 steps ended
    bursts of 4 part way (CPU engine, STANDALONE, moe-fine x48, arithmetic at batch 8 without judgements: 11
    scheduler steps for a 31-token wave against 8 at K = 0)."""
    if steps <= 0:
        return steps
    forwards = -(-(steps + 1) // burst) * burst
    return min(forwards, max(_whole(burst, max_rest), steps + 1)) - 1


def _whole(burst: int, max_rest: int) -> int:
    """The most forwards a rest may take with the step that starts it (max_rest + 1), in whole bursts where that
    allows one."""
    return max_rest + 1 if max_rest + 1 < burst else (max_rest + 1) // burst * burst


def align_rests(self: MoeServePolicy, started: dict[str, int], reqs) -> None:
    """Rests of requests with their draft in hand that start this step end with the latest rest of the batch, where
    that is at most `max_rest` steps away: a plain burst runs only while every request of the batch rests
    (moe_sglang/plain_burst.py), and back-offs that start at different steps end at different steps. In the CPU
    engine (NGRAM, moe-fine x48, math at batch 8, 2026-11-29) the eight requests' rests, each 1, 2 or 4 steps, left
    no step in which all rested: 30 scheduler steps for 31 tokens, each with its lookups, judgements and the policy
    (~2 ms at batch 8) and the scheduler's own ~2 ms between steps, 1.05x the TPOT of the same engine at a K = 0 hint.
    A rest is only lengthened, by at most max_rest - 1 steps: a request whose text turns predictable is judged again
    that much later."""
    left = [self._rest_until.get(r.request_id, 0) - r.tokens_so_far - 1 for r in reqs]
    latest = max(left)
    if latest > self.max_rest:  # a judged request resting until its judgement: not a back-off to meet
        latest = max((x for x in left if x <= self.max_rest), default=0)
    for r in reqs:
        if r.request_id in started and latest > started[r.request_id]:
            self._rest_until[r.request_id] = r.tokens_so_far + 1 + latest


def join_rests(self: MoeServePolicy, declined: list[int], reqs) -> None:
    """Requests with their draft in hand that stay at K = 0 this step although their drafts could pay (latest judged
    draft accepted, or an optimistic bound on their acceptance would speculate) rest with the batch where every
    other request of it rests after this step: until the first of those rests ends. One such request otherwise keeps
    a batch whose other requests all rest from its plain bursts (CPU engine, NGRAM math at batch 8, with the rests
    aligned but not joined: steps with seven requests resting and one judged, one token each). The policy
    declined its drafts this step; it is weighed again at most `max_rest` steps later."""
    chosen = set(declined)
    left = [self._rest_until.get(r.request_id, 0) - r.tokens_so_far - 1 for j, r in enumerate(reqs) if j not in chosen]
    if not left or min(left) < 1:
        return
    steps = min(min(left), self.max_rest)
    for i in declined:
        self._rest_until[reqs[i].request_id] = reqs[i].tokens_so_far + 1 + steps


def could_pay(
    self: MoeServePolicy, i: int, probs: list[list[float]], caps: list[int], k_cap: int, batch: BatchView
) -> bool:
    """Whether request `i` would speculate with a draft of full depth at an optimistic bound on its own measured
    acceptance (rejudging_could_pay's bound)."""
    full = list(caps)
    full[i] = life_cap(k_cap, batch.requests[i])
    return rejudging_could_pay(self, i, probs, full, batch)
