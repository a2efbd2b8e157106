"""Plain bursts: where no request of a speculative engine's decode batch may draft, one scheduler step decodes up to
`plain_burst` tokens per request, one plain decode forward each (plain_decode.py), reported to SGLang's scheduler as
a verify step whose accepted run is those tokens.

Why: a speculative step at K = 0 is a plain forward inside SGLang's speculative scheduler path, which a registered
algorithm cannot leave (SGLang 0.5.23 keys the path on the server-wide algorithm) and which costs more than the plain
engine's loop: measured inside the engines on moe-fine x48 (README, K = 0 section), 1.8-2.0 ms of scheduler work
outside the forward per step against 1.2-1.4 ms for the plain engine, so that a request whose speculation is off
decoded 1.05-1.11x slower than on an engine without speculation. The scheduler's part of a step (planning the batch,
reserving KV slots, the result's bookkeeping and the stream to the detokenizer) does not depend on how many tokens
the step brings; a burst pays it once for its tokens. It is the multi-step scheduling of other engines, here only
for batches in which nothing could speculate, so no draft is delayed by it.

What bounds a burst (`burst_len`):
- the batch: every request capped at K = 0 by its hints or resting through the steps the burst covers (step.py),
  so no policy has a decision to make in them. A rest the policy starts in this very step counts: a step in which
  the policies were asked and put every request to rest (moe-serve: a batch whose requests' drafts could not pay,
  its rests aligned) bursts on. Without that, each such step was a scheduler step of its own before the rest's
  burst (CPU engine, NGRAM, moe-fine x48, code at batch 8: 17-27 scheduler steps for a 31-token wave against 8 at
  a K = 0 hint, 1.06x its TPOT; bench/results/awake-s46);
- each resting request's rest: a burst ends where the first rest does (the policy's next judgement comes on time);
- each request's tokens left (max_new_tokens), and the KV slots the scheduler reserved for the step (a speculative
  decode reserves at least 2 x num_draft_tokens per request, SGLang's `get_alloc_reserve_per_decode`);
- the result's row width (num_draft_tokens): a step's tokens travel in rows of that width;
- sampling that reads per-token state the scheduler updates between steps: logprobs, grammars, penalties (their
  counts are cumulated in the scheduler's decode preparation), custom logit processors, watermarks, returned hidden
  states or sampling masks: such a batch steps one token at a time;
- arrivals: after each forward the burst ends if a request is waiting to be received or planned (`input_pending`),
  so a new request waits for at most one more forward than on a one-token step. The probe is the scheduler's
  input socket, which the arrival gather's hook hands over (arrival_gather.py; with `arrival_gather_ms=0` there is
  no probe and a burst runs to its other bounds).
A request that finishes inside a burst (a stop token or string) is cut there by SGLang's result processing, as an
accepted draft run is; the burst's later tokens of it are dropped.
"""

from __future__ import annotations

from moe_sglang.step import StepInFlight

_SCHEDULER = None  # the scheduler whose input input_pending() watches (watch)


def watch(scheduler) -> None:
    """Called with the scheduler at its receives (arrival_gather.py): the burst's arrival probe."""
    global _SCHEDULER
    _SCHEDULER = scheduler


def input_pending() -> bool:
    """A request waits to be received (the scheduler's input socket has a message) or to be planned."""
    scheduler = _SCHEDULER
    if scheduler is None:
        return False
    if scheduler.waiting_queue or scheduler.chunked_req is not None or scheduler._deferred_input_requests:
        return True
    socket = getattr(scheduler, "recv_from_tokenizer", None)
    poll = getattr(socket, "poll", None)
    return bool(poll(0)) if poll is not None else False


def burst_len(worker, batch, step: StepInFlight) -> int:
    """Plain forwards this step may run (1 = an ordinary plain step); see the module docstring for the bounds."""
    limit = min(worker.settings.plain_burst, worker.speculative_num_draft_tokens)
    if limit <= 1 or not _plain_sampling(worker, batch):
        return 1
    resting = worker.spec_runtime.resting  # rests this step's plan started included (SpecRuntime.plan)
    ceilings = step.ceilings()
    for i, req in enumerate(batch.reqs):
        done = len(req.output_ids)
        cap = getattr(req.sampling_params, "max_new_tokens", None)
        if cap is not None:
            limit = min(limit, cap - done)
        until = resting.get(req.rid)
        if until is not None:
            limit = min(limit, until - done)
        elif ceilings[i] > 0:  # may draft next step: a policy is asked then
            return 1
        kv = getattr(req, "kv", None)
        if kv is None:
            return 1
        limit = min(limit, kv.kv_allocated_len - kv.kv_committed_len)
        if limit <= 1:
            return 1
    return limit


def _plain_sampling(worker, batch) -> bool:
    """Sampling of each token depends only on the model's logits and the request's fixed parameters."""
    info = batch.sampling_info
    if batch.return_logprob or batch.has_grammar or info is None:
        return False
    penalties = info.penalizer_orchestrator
    if (penalties is not None and penalties.is_required) or info.has_custom_logit_processor:
        return False
    if getattr(worker.target_worker.model_runner, "watermark_state", None) is not None:
        return False
    return not any(req.return_hidden_states or getattr(req, "return_sampling_mask", False) for req in batch.reqs)
