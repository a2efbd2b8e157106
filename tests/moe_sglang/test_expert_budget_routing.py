"""Expert budget inside a verify forward (the TopK hook's tensor part), against the moe_ref oracle."""

import pytest
import torch

from moe_sglang.expert_budget import VerifyExperts, route_in_verify
from service.kernels.moe_ref import apply_budget_truncation, route_topk, select_budget_experts

T, E, K = 12, 8, 2


def routing(seed=0):
    logits = torch.randn(T, E, generator=torch.Generator().manual_seed(seed)) * 3  # [T, E]
    ids, weights = route_topk(logits, K)
    return logits, weights, ids


def test_no_budget_passes_through_and_counts():
    logits, w, ids = routing()
    scope = VerifyExperts()
    w2, ids2 = route_in_verify(scope, 0, w, ids, logits, renormalize=True, plain_softmax=True)
    assert torch.equal(w2, w) and torch.equal(ids2, ids)
    unique, dropped = scope.counts()
    assert unique == (len(set(ids.flatten().tolist())),) and dropped == 0


def test_counts_over_layers_with_and_without_a_budget_and_repeated_calls():
    """Unbudgeted layers are counted from their ids at the end (one scatter), budgeted ones from masks; a layer
    routed twice in one forward counts the union; id -1 (padding) is no expert."""
    scope = VerifyExperts(budget=(E, 2, E))  # layer 1 budgeted, layers 0 and 2 not
    seen = {}
    for layer, seed in ((0, 2), (1, 3), (2, 4), (2, 5)):
        logits, w, ids = routing(seed)
        if seed == 4:
            ids = ids.clone()
            ids[0] = -1
        _, out = route_in_verify(scope, layer, w, ids, logits, renormalize=True, plain_softmax=True)
        seen.setdefault(layer, set()).update(i for i in out.flatten().tolist() if i >= 0)
    unique, dropped = scope.counts()
    assert unique == tuple(len(seen[layer]) for layer in (0, 1, 2))
    assert unique[1] <= 2 and dropped > 0


def test_one_token_per_layer_counts_its_k_experts():
    scope = VerifyExperts()
    for layer, seed in ((0, 7), (1, 8)):
        logits, w, ids = routing(seed)
        route_in_verify(scope, layer, w[:1], ids[:1], logits[:1], renormalize=True, plain_softmax=True)
    assert scope.counts() == ((K, K), 0)


def test_layers_routed_alike_are_counted_and_listed_in_one_stack():
    """Every layer routed once with the same shape (a decode or verify forward): counts and token_experts read all
    layers from one stacked tensor; id -1 is no expert."""
    scope = VerifyExperts()
    expected, listed = [], []
    for layer, seed in ((0, 11), (1, 12), (2, 13)):
        logits, w, ids = routing(seed)
        if layer == 1:
            ids = ids.clone()
            ids[3] = -1
        route_in_verify(scope, layer, w, ids, logits, renormalize=True, plain_softmax=True)
        expected.append(len({i for i in ids.flatten().tolist() if i >= 0}))
        listed.append(ids.tolist())
    assert scope.counts() == (tuple(expected), 0)
    assert scope.token_experts() == listed


def test_counts_when_layers_saw_different_token_counts():
    scope = VerifyExperts()
    logits, w, ids = routing(6)
    route_in_verify(scope, 0, w, ids, logits, renormalize=True, plain_softmax=True)
    route_in_verify(scope, 1, w[:3], ids[:3], logits[:3], renormalize=True, plain_softmax=True)
    assert scope.counts() == ((len(set(ids.flatten().tolist())), len(set(ids[:3].flatten().tolist()))), 0)


@pytest.mark.parametrize("budget", [E, E + 3])
def test_budget_of_all_experts_changes_nothing(budget):
    logits, w, ids = routing(1)
    w2, ids2 = route_in_verify(VerifyExperts(budget=(budget,)), 0, w, ids, logits, renormalize=True, plain_softmax=True)
    assert torch.equal(w2, w) and torch.equal(ids2, ids)


@pytest.mark.parametrize("mode", ["truncation", "substitution"])
@pytest.mark.parametrize("budget", [1, 2, 3, 5])
def test_budget_limits_touched_experts(mode, budget):
    logits, w, ids = routing(2)
    scope = VerifyExperts(budget=(budget, budget), mode=mode)
    for layer in (0, 1):
        route_in_verify(scope, layer, w, ids, logits, renormalize=True, plain_softmax=True)
    unique, dropped = scope.counts()
    wanted = len(set(ids.flatten().tolist()))
    assert all(u <= max(budget, K) for u in unique)  # B is raised to top_k
    assert dropped == 2 * (wanted - unique[0])


def test_truncation_matches_oracle_on_kept_slots():
    logits, w, ids = routing(3)
    w2, ids2 = route_in_verify(VerifyExperts(budget=(3,)), 0, w, ids, logits, renormalize=True, plain_softmax=True)
    mask = select_budget_experts(torch.softmax(logits, -1), 3)
    _, ref_w = apply_budget_truncation(ids, w, mask, renormalize=True)
    assert torch.allclose(w2, ref_w)
    kept = mask[ids]
    assert torch.equal(ids2[kept], ids[kept])  # kept slots keep their expert
    assert bool(mask[ids2].all())  # dropped slots point inside the budget, with weight 0
    assert all(len(set(row)) == K for row in ids2.tolist())  # distinct experts per token (SGLang's CPU MoE needs it)
    assert bool((w2[~kept] == 0).all())


def test_substitution_needs_plain_softmax():
    logits, w, ids = routing(4)
    sub = route_in_verify(
        VerifyExperts(budget=(3,), mode="substitution"), 0, w, ids, logits, renormalize=True, plain_softmax=True
    )
    trunc = route_in_verify(
        VerifyExperts(budget=(3,), mode="substitution"), 0, w, ids, logits, renormalize=True, plain_softmax=False
    )
    # substitution gives every token K in-budget experts with positive weight; the fallback truncates instead
    assert bool((sub[0] > 0).all())
    assert not torch.equal(sub[0], trunc[0])


def test_only_acceptable_tokens_vote():
    logits, w, ids = routing(5)
    votes = torch.zeros(T)
    votes[:3] = 1.0
    scope = VerifyExperts(budget=(2,), token_weights=votes)
    route_in_verify(scope, 0, w, ids, logits, renormalize=True, plain_softmax=True)
    expected = select_budget_experts(torch.softmax(logits[:3], -1), 2)
    touched = scope.touched[0][1:]
    assert torch.equal(touched, expected)


def test_plain_steps_count_experts_and_measure_each_requests_expert_reuse(monkeypatch):
    """A plain decode step is counted through the routing scope (k experts per layer for one token, the union for a
    batch) and reports, per request, the share of its token's experts that its previous plain-decoded token also
    routed to: None at its first plain step and after a step that was not plain."""
    from types import SimpleNamespace

    from moe_sglang import expert_budget, verify
    from moe_sglang.plain_decode import PlainDecode

    shift = {"now": 0}  # experts move by this many ids per step: K - shift of a token's K experts are reused

    def fake_decode(
        target_worker, batch, roots, offset=0
    ):  # two MoE layers, token t routed to experts Kt + s .. Kt + s + K - 1
        scope = expert_budget._VERIFY.get()
        assert scope is not None
        for layer in (0, 1):
            ids = (torch.arange(K * roots.numel()).reshape(-1, K) + shift["now"]) % E
            route_in_verify(
                scope,
                layer,
                torch.ones_like(ids, dtype=torch.float),
                ids,
                torch.zeros(len(ids), E),
                renormalize=False,
                plain_softmax=True,
            )
        return PlainDecode(roots, None, False, roots)

    monkeypatch.setattr(verify, "run_plain_decode", fake_decode)
    monkeypatch.setattr(verify, "last_tokens", lambda reqs, device: torch.zeros(len(reqs), dtype=torch.int64))
    monkeypatch.setattr(verify.StepOutput, "plain", classmethod(lambda cls, *args: SimpleNamespace()))
    runtime = SimpleNamespace(last_routing={}, last_routing_step=-1, steps=0, count_forward=lambda kind, n: None)
    worker = SimpleNamespace(
        device="cpu",
        spec_runtime=runtime,
        settings=SimpleNamespace(budget_mode="truncation"),
        target_worker=None,
        speculative_num_draft_tokens=4,
        draft_token_num=4,
    )
    monkeypatch.setattr(verify, "_stride", lambda w: 4)

    def step(rids, moved=0, may_draft=True, resting=()):
        shift["now"] += moved
        views = ("a view",) if may_draft else ()  # step.open builds none where no request may draft
        s = SimpleNamespace(verify_s=0.0, plain=False, unique_experts=(), expert_reuse=(), views=views, resting=resting)
        verify.plain_step(worker, SimpleNamespace(reqs=[SimpleNamespace(rid=r) for r in rids]), s)
        runtime.steps += 1  # the step is closed
        return s.unique_experts, s.expert_reuse

    assert step(["a"]) == ((K, K), (None,))
    assert step(["a"]) == ((K, K), (1.0,))  # the same experts again
    assert step(["a"], moved=1) == ((K, K), ((K - 1) / K,))  # one of K experts is new
    runtime.steps += 1  # a verify step in between: its token was not plain-decoded
    assert step(["a"]) == ((K, K), (None,))
    unique, reuse = step(["a"] + [f"b{i}" for i in range(5)])  # a batch is counted: the union of its experts
    assert unique == (E, E) and reuse == (1.0, None, None, None, None, None)
    # nobody may draft: counted, no reuse measured (no draft will be priced by it), and none carried to the next
    assert step(["a"], may_draft=False) == ((K, K), ())
    assert step(["a"]) == ((K, K), (None,))
    # a request resting alone (no views: no policy asked) may draft once its rest ends: measured
    assert step(["a"], may_draft=False, resting=(True,)) == ((K, K), (1.0,))
    assert step(["a"], moved=1) == ((K, K), ((K - 1) / K,))


def test_routing_computed_outside_the_hook_is_counted_as_the_hook_counts_it():
    """The decode MoE op (target_forward.py) routes in C++: it asks `budgeted` first and records its ids with
    `record_routed`, which must count what route_in_verify counts for the same unbudgeted routing."""
    from moe_sglang.expert_budget import budgeted, record_routed, routing_scope

    logits, w, ids = routing(7)
    assert not budgeted(0, E, K)  # no scope: nothing counts, nothing budgets
    record_routed(0, ids, E)  # and recording is a no-op
    with routing_scope(None, "truncation") as by_op:
        assert not budgeted(0, E, K)
        record_routed(0, ids, E)
    by_hook = VerifyExperts()
    route_in_verify(by_hook, 0, w, ids, logits, renormalize=True, plain_softmax=True)
    assert by_op.counts() == by_hook.counts() and by_op.token_experts() == by_hook.token_experts()
    with routing_scope((E, 3), "truncation"):  # layer 1 budgeted below its E experts, layer 0 not
        assert not budgeted(0, E, K) and budgeted(1, E, K)


def _redirect_slot_by_slot(ids, mask, probs):
    """The slot-by-slot fill redirect_dropped replaced: each out-of-budget slot takes the first candidate not yet in
    its row."""
    k = ids.shape[1]
    candidates = probs.masked_fill(~mask[None, :], float("-inf")).topk(k, dim=-1).indices
    out = ids.clone()
    for slot in range(k):
        need = ~mask[out[:, slot]]
        for c in range(k):
            cand = candidates[:, c]
            take = need & ~(out == cand[:, None]).any(dim=-1)
            out[:, slot] = torch.where(take, cand, out[:, slot])
            need = need & ~take
    return out


@pytest.mark.parametrize("experts,k", [(8, 2), (32, 4), (64, 8)])
def test_redirect_dropped_fills_slots_as_one_by_one_in_candidate_order(experts, k):
    from moe_sglang.expert_budget import redirect_dropped

    g = torch.Generator().manual_seed(experts + k)
    for trial in range(40):
        tokens = 1 + trial % 24
        logits = torch.randn(tokens, experts, generator=g) * 3
        probs = torch.softmax(logits, dim=-1)
        ids, _ = route_topk(logits, k)
        budget = k + trial % (experts - k + 1)
        mask = select_budget_experts(probs, budget)
        out = redirect_dropped(ids, mask, probs)
        assert torch.equal(out, _redirect_slot_by_slot(ids, mask, probs))
        assert bool(mask[out].all()) and all(len(set(row)) == k for row in out.tolist())
        assert torch.equal(out[mask[ids]], ids[mask[ids]])  # kept slots keep their expert
