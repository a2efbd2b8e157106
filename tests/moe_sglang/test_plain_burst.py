"""Plain bursts (moe_sglang/plain_burst.py): where nobody in a speculative engine's batch may draft, one step decodes
up to `plain_burst` tokens per request, bounded by rests, tokens left, reserved KV slots, sampling state and
arrivals; each forward is a step of its own to the policies and the stats."""

import contextlib
from types import SimpleNamespace

import pytest
import torch

from moe_sglang import plain_burst, verify
from moe_sglang.hints import RequestHints
from moe_sglang.plain_decode import PlainDecode
from moe_sglang.step import StepInFlight


def _req(rid, out=10, max_new=100, allocated=30, committed=20, **flags):
    return SimpleNamespace(
        rid=rid,
        output_ids=[0] * out,
        sampling_params=SimpleNamespace(max_new_tokens=max_new),
        kv=SimpleNamespace(kv_allocated_len=allocated, kv_committed_len=committed),
        return_hidden_states=flags.get("hidden", False),
        return_sampling_mask=flags.get("mask", False),
    )


def _batch(reqs, logprob=False, grammar=False, penalties=False, custom=False):
    info = SimpleNamespace(
        penalizer_orchestrator=SimpleNamespace(is_required=penalties), has_custom_logit_processor=custom
    )
    return SimpleNamespace(reqs=reqs, return_logprob=logprob, has_grammar=grammar, sampling_info=info)


def _worker(burst=4, draft_tokens=4, resting=None):
    return SimpleNamespace(
        settings=SimpleNamespace(plain_burst=burst, budget_mode="truncation"),
        speculative_num_draft_tokens=draft_tokens,
        spec_runtime=SimpleNamespace(resting=resting or {}),
        target_worker=SimpleNamespace(model_runner=SimpleNamespace(watermark_state=None)),
    )


def _step(n, views=(), resting=(), max_k=0):
    hints = (RequestHints(max_k=max_k),) * n
    return StepInFlight(tuple(f"r{i}" for i in range(n)), hints, views, 3, 100, 0.0, resting=resting)


def test_a_batch_nobody_may_draft_bursts_to_the_settings_and_row_width():
    reqs = [_req("r0"), _req("r1")]
    assert plain_burst.burst_len(_worker(burst=4), _batch(reqs), _step(2)) == 4
    assert plain_burst.burst_len(_worker(burst=8, draft_tokens=5), _batch(reqs), _step(2)) == 5  # rows of 5
    assert plain_burst.burst_len(_worker(burst=1), _batch(reqs), _step(2)) == 1  # off


def test_a_batch_with_a_request_that_may_draft_steps_one_token():
    assert plain_burst.burst_len(_worker(), _batch([_req("r0")]), _step(1, views=("a view",), max_k=None)) == 1


def test_a_step_whose_plan_put_every_request_to_rest_bursts_to_the_first_rest_end():
    # the policies were asked this step (views) and rested both requests (SpecRuntime.plan wrote their rests)
    worker = _worker(burst=4, resting={"r0": 13, "r1": 14})
    batch = _batch([_req("r0", out=10), _req("r1", out=10)])
    assert plain_burst.burst_len(worker, batch, _step(2, views=("a", "b"), max_k=None)) == 3
    # one of them was left awake (it may draft next step): the policy must be asked again after one token
    worker = _worker(burst=4, resting={"r0": 13})
    assert plain_burst.burst_len(worker, batch, _step(2, views=("a", "b"), max_k=None)) == 1


def test_a_burst_ends_where_the_first_rest_ends_and_within_tokens_left_and_reserved_slots():
    worker = _worker(burst=4, resting={"r0": 12})  # r0 rests until it has 12 tokens: 2 more
    batch = _batch([_req("r0", out=10), _req("r1", out=10)])
    assert plain_burst.burst_len(worker, batch, _step(2, resting=(True, False))) == 2
    assert plain_burst.burst_len(_worker(), _batch([_req("r0", out=10, max_new=13)]), _step(1)) == 3
    assert plain_burst.burst_len(_worker(), _batch([_req("r0", allocated=22, committed=20)]), _step(1)) == 2
    assert plain_burst.burst_len(_worker(), _batch([_req("r0", out=10, max_new=11)]), _step(1)) == 1


@pytest.mark.parametrize(
    "batch",
    [
        _batch([_req("r0")], logprob=True),
        _batch([_req("r0")], grammar=True),
        _batch([_req("r0")], penalties=True),
        _batch([_req("r0")], custom=True),
        _batch([_req("r0", hidden=True)]),
        _batch([_req("r0", mask=True)]),
    ],
    ids=["logprobs", "grammar", "penalties", "custom-logit-processor", "hidden-states", "sampling-mask"],
)
def test_sampling_that_reads_per_token_state_steps_one_token(batch):
    assert plain_burst.burst_len(_worker(), batch, _step(1)) == 1


def test_arrivals_are_pending_while_the_socket_or_the_queues_hold_a_request(monkeypatch):
    socket = SimpleNamespace(events=0)
    socket.poll = lambda timeout: socket.events
    scheduler = SimpleNamespace(
        waiting_queue=[], chunked_req=None, _deferred_input_requests=[], recv_from_tokenizer=socket
    )
    monkeypatch.setattr(plain_burst, "_SCHEDULER", None)
    assert not plain_burst.input_pending()  # nothing watched: no probe
    plain_burst.watch(scheduler)
    assert not plain_burst.input_pending()
    socket.events = 1  # zmq.POLLIN
    assert plain_burst.input_pending()
    socket.events = 0
    scheduler.waiting_queue.append("a request")
    assert plain_burst.input_pending()


def _burst_worker(monkeypatch, pending_after=None):
    """A worker whose plain forward returns root + 1 for every request, recording each forward's offset and roots."""
    calls = []

    def fake_decode(target_worker, batch, roots, offset=0):
        calls.append((offset, roots.tolist()))
        return PlainDecode(roots + 1, None, False, torch.full((len(batch.reqs),), 20 + offset + 1))

    class Experts:
        def counts(self):
            return ((2, 2), 0)

        def token_experts(self):
            return None

    forwards = []
    monkeypatch.setattr(verify, "run_plain_decode", fake_decode)
    monkeypatch.setattr(
        verify, "last_tokens", lambda reqs, device: torch.tensor([100 * (i + 1) for i in range(len(reqs))])
    )
    monkeypatch.setattr(verify, "routing_scope", lambda *a: contextlib.nullcontext(Experts()))
    monkeypatch.setattr(verify, "input_pending", lambda: pending_after is not None and len(calls) >= pending_after)
    runtime = SimpleNamespace(
        last_routing={}, last_routing_step=-1, steps=0, count_forward=lambda kind, n: forwards.append((kind, n))
    )
    worker = SimpleNamespace(
        device="cpu", spec_runtime=runtime, settings=SimpleNamespace(budget_mode="truncation"), target_worker=None,
        speculative_num_draft_tokens=4,
    )  # fmt: skip
    return worker, calls, forwards


def test_a_burst_chains_its_forwards_and_reports_each_as_a_step(monkeypatch):
    worker, calls, forwards = _burst_worker(monkeypatch)
    batch = SimpleNamespace(reqs=[SimpleNamespace(rid="r0"), SimpleNamespace(rid="r1")], device="cpu",
                            seq_lens=torch.tensor([20, 20]))  # fmt: skip
    step = _step(2, resting=(True, True))
    out = verify.plain_step(worker, batch, step, burst=3)
    # each forward decodes the token the one before it sampled, one position further
    assert calls == [(0, [100, 200]), (1, [101, 201]), (2, [102, 202])]
    assert forwards == [("decode", 2)] * 3
    rows = out.result.next_token_ids.tolist()
    assert rows[:3] == [101, 102, 103] and rows[4:7] == [201, 202, 203]
    assert out.result.accept_lens.tolist() == [3, 3] and out.accepted() == [0, 0]
    # the later forwards are steps of their own (closed after this one), each timed where it ended
    assert len(out.following) == 2 and all(s.plain and s.plan is step.plan for s in out.following)
    assert step.ended is not None and out.following[0].ended is not None and out.following[1].ended is None
    assert step.ended <= out.following[0].started and out.following[0].resting == (True, True)
    assert worker.spec_runtime.last_routing_step == 3  # the runtime's step count once the three are closed


def test_a_burst_ends_after_the_forward_during_which_a_request_arrived(monkeypatch):
    worker, calls, _ = _burst_worker(monkeypatch, pending_after=2)
    batch = SimpleNamespace(reqs=[SimpleNamespace(rid="r0")], device="cpu", seq_lens=torch.tensor([20]))
    out = verify.plain_step(worker, batch, _step(1), burst=4)
    assert [offset for offset, _ in calls] == [0, 1]
    assert out.result.accept_lens.tolist() == [2] and len(out.following) == 1
    assert out.following[0].ended is None  # the last forward's step closes at its close


def test_a_draft_judged_through_a_burst_is_walked_along_each_forwards_token():
    """NGRAM's unverified drafts (shadow.py) are judged one emitted token per step: a burst's steps each read their own
    column of the run, so a walk in progress follows the tokens in order."""
    import numpy as np

    from moe_sglang.ngram_worker import _judge_shadow
    from moe_sglang.shadow import ShadowDrafts
    from moe_sglang.verify import DraftTrees

    shadow = ShadowDrafts()
    n = 4
    chain = np.tril(np.ones((n, n), dtype=bool))[None]  # root -> 5 -> 6 -> 7
    trees = DraftTrees(np.array([1, 5, 6, 7]), chain, [3])
    first = SimpleNamespace(rids=("a",))
    out = SimpleNamespace(result=SimpleNamespace(next_token_ids=torch.tensor([5, 0, 0, 0])))
    assert _judge_shadow(shadow, first, [0], trees, out) == ()  # a plain step: the walk starts and matches 5
    out = SimpleNamespace(result=SimpleNamespace(next_token_ids=torch.tensor([6, 9, 0, 0])))  # a burst of two
    assert _judge_shadow(shadow, first, [0], DraftTrees.nothing(1), out, column=0) == ()  # 6 matches
    (judged,) = _judge_shadow(shadow, first, [0], DraftTrees.nothing(1), out, column=1)  # 9 is not 7
    assert (judged.k, judged.accepted) == (3, 2)


def test_resting_requests_are_looked_up_for_judging_only_where_no_draft_of_theirs_is_judged(monkeypatch):
    """A resting request's draft in hand (NGRAM) is judged by the tokens emitted during its rest (one accepted to its
    end ends the rest): it is looked up where no walk of its is in progress, and the policies see no draft for it."""
    from moe_sglang import ngram_worker
    from moe_sglang.shadow import ShadowDrafts
    from moe_sglang.verify import DraftTrees

    asked = []
    monkeypatch.setattr(
        ngram_worker, "lookup", lambda worker, reqs, rows: asked.append(rows) or DraftTrees(None, None, [4, 4, 4])
    )
    shadow = ShadowDrafts()
    shadow.walks["r1"] = object()  # r1's draft is being judged already
    worker = SimpleNamespace(shadow=shadow, spec_runtime=SimpleNamespace(count_draft=lambda: None))
    step = StepInFlight(("r0", "r1", "r2"), (RequestHints(max_k=0),) * 3, (), 3, 100, 0.0, resting=(True, True, False))
    trees = ngram_worker._timed_lookup(worker, SimpleNamespace(reqs=[None] * 3), step)
    assert asked == [[0]]  # r2 is capped at K = 0 by its hints: never looked up
    assert ngram_worker._unresting(trees.drafts, step) == [0, 0, 4]
    awake = StepInFlight(("r0",), (RequestHints(),), (), 3, 100, 0.0)
    ngram_worker._timed_lookup(worker, SimpleNamespace(reqs=[None]), awake)
    assert asked[-1] == [0] and ngram_worker._unresting([4], awake) == [4]


def test_an_accepted_judgement_ends_a_rest_in_the_runtime():
    """Decision.rest_until: a judged draft that was accepted to its end ends its request's rest (the policy ends its
    own in observe); one rejected at any position leaves it."""
    from moe_sglang.settings import EngineSettings
    from moe_sglang.step import SpecRuntime
    from service.policy import ShadowOutcome

    runtime = SpecRuntime(EngineSettings(), {"num_experts": 8, "top_k": 2, "num_layers": 2})
    runtime.resting = {"r0": 30, "r1": 30, "r2": 30}
    step = StepInFlight(("r0", "r1", "r2"), (RequestHints(),) * 3, (), 3, 100, 0.0, resting=(True, True, True))
    runtime.plan(step)
    step.plain = True
    judged = (ShadowOutcome("r0", 4, 4, 4), ShadowOutcome("r1", 4, 2, 1), ShadowOutcome("r2", 4, 1, 0))
    runtime.close(step, [0, 0, 0], [0, 0, 0], judged)
    assert runtime.resting == {"r1": 30, "r2": 30}
