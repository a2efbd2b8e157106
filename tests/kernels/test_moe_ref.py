"""The torch MoE reference: forward vs a naive per-token loop, the expert mask, Mixtral routing and the MoE-Spec budget."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels.moe_ref import (
    apply_budget_substitution,
    apply_budget_truncation,
    moe_forward,
    route_topk,
    select_budget_experts,
)


def naive_moe(x, w13, w2, topk_ids, topk_weights, expert_mask=None):
    """One token, one slot at a time, straight from the Mixtral block's definition."""
    inter = w13.shape[1] // 2
    out = torch.zeros_like(x, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            if expert_mask is not None and not expert_mask[e]:
                continue
            xt = x[t].double()
            gate = F.linear(xt, w13[e, :inter].double())
            up = F.linear(xt, w13[e, inter:].double())
            out[t] += topk_weights[t, j].double() * F.linear(F.silu(gate) * up, w2[e].double())
    return out.to(x.dtype)


def make_inputs(tokens, hidden, inter, experts, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    ids, weights = route_topk(torch.randn(tokens, experts, generator=gen), k)
    return x, w13, w2, ids, weights


@pytest.mark.parametrize(
    ("tokens", "hidden", "inter", "experts", "k"),
    [(1, 8, 4, 2, 1), (5, 16, 12, 4, 2), (9, 12, 20, 8, 3), (0, 8, 4, 4, 2), (6, 8, 8, 3, 3)],
)
def test_forward_matches_naive_loop(tokens, hidden, inter, experts, k):
    x, w13, w2, ids, weights = make_inputs(tokens, hidden, inter, experts, k)
    torch.testing.assert_close(moe_forward(x, w13, w2, ids, weights), naive_moe(x, w13, w2, ids, weights))


@given(
    tokens=st.integers(1, 8),
    experts=st.integers(2, 8),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_mask_equals_truncation_without_renormalisation(tokens, experts, data):
    """moe_forward(mask) == the unmasked forward with out-of-budget slots weighted 0 == the naive loop skipping them."""
    k = data.draw(st.integers(1, experts))
    bits = data.draw(st.lists(st.booleans(), min_size=experts, max_size=experts))
    mask = torch.tensor(bits, dtype=torch.bool)
    x, w13, w2, ids, weights = make_inputs(tokens, 8, 6, experts, k, seed=tokens * 31 + experts)
    masked = moe_forward(x, w13, w2, ids, weights, mask)
    _, truncated = apply_budget_truncation(ids, weights, mask, renormalize=False)
    torch.testing.assert_close(masked, moe_forward(x, w13, w2, ids, truncated))
    torch.testing.assert_close(masked, naive_moe(x, w13, w2, ids, weights, mask))


def test_mask_with_every_expert_equals_no_mask():
    x, w13, w2, ids, weights = make_inputs(7, 16, 8, 4, 2)
    everything = torch.ones(4, dtype=torch.bool)
    assert torch.equal(moe_forward(x, w13, w2, ids, weights, everything), moe_forward(x, w13, w2, ids, weights))


def test_masked_experts_are_never_read():
    x, w13, w2, ids, weights = make_inputs(12, 16, 8, 4, 2)
    mask = torch.tensor([True, False, True, False])
    want = naive_moe(x, w13, w2, ids, weights, mask)
    w13[~mask] = float("nan")
    w2[~mask] = float("nan")
    got = moe_forward(x, w13, w2, ids, weights, mask)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want)
    # Tokens whose experts are all masked get exactly zero: the residual stream carries them.
    dropped = ~mask[ids].any(dim=1)
    assert torch.equal(got[dropped], torch.zeros_like(got[dropped]))


def test_unmasked_nan_expert_does_poison_the_output():
    """Guard for the test above: a NaN expert that is *not* masked must show up, or the NaN check proves nothing."""
    x, w13, w2, ids, weights = make_inputs(12, 16, 8, 4, 2)
    w13[1] = float("nan")
    out = moe_forward(x, w13, w2, ids, weights)
    assert torch.isnan(out[(ids == 1).any(dim=1)]).all()


def test_route_topk_is_mixtral_routing():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 3.0, 3.5, 0.0]])
    ids, weights = route_topk(logits, 2)
    assert ids.tolist() == [[0, 1], [2, 1]]
    torch.testing.assert_close(weights, torch.softmax(logits.gather(1, ids), dim=-1))
    _, raw = route_topk(logits, 2, renormalize=False)
    torch.testing.assert_close(raw, torch.softmax(logits, dim=-1).gather(1, ids))


@pytest.mark.parametrize(
    ("probs", "budget", "token_weights", "kept"),
    [
        # column sums 0.6, 0.4, 0.3, 0.7
        ([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.1, 0.7]], 2, None, [0, 3]),
        ([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.1, 0.7]], 1, None, [3]),
        ([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.1, 0.7]], 4, None, [0, 1, 2, 3]),
        # the second token counts 0.1×: expert 3 falls to 0.07
        ([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.1, 0.7]], 2, [1.0, 0.1], [0, 1]),
        # ties go to the lower id
        ([[0.25, 0.25, 0.25, 0.25]], 2, None, [0, 1]),
    ],
)
def test_select_budget_experts(probs, budget, token_weights, kept):
    weights = None if token_weights is None else torch.tensor(token_weights)
    mask = select_budget_experts(torch.tensor(probs), budget, token_weights=weights)
    assert mask.dtype == torch.bool
    assert torch.nonzero(mask).flatten().tolist() == kept


def test_substitution_and_truncation_differ_on_an_out_of_budget_choice():
    # Token 0 prefers experts 0 then 1; expert 1 is outside the budget {0, 2, 3}.
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 0.0, 2.0, 3.0]])
    probs = torch.softmax(logits, dim=-1)
    mask = torch.tensor([True, False, True, True])

    sub_ids, sub_weights = apply_budget_substitution(logits, mask, 2)
    assert sub_ids.tolist() == [[0, 2], [3, 2]]  # token 0 takes its best in-budget expert instead
    torch.testing.assert_close(sub_weights[0], probs[0, [0, 2]] / probs[0, [0, 2]].sum())
    _, sub_raw = apply_budget_substitution(logits, mask, 2, renormalize=False)
    torch.testing.assert_close(sub_raw[0], probs[0, [0, 2]])  # router probabilities are not re-softmaxed

    ids, weights = route_topk(logits, 2)
    trunc_ids, trunc_weights = apply_budget_truncation(ids, weights, mask, renormalize=False)
    assert trunc_ids.tolist() == [[0, 1], [3, 2]]
    torch.testing.assert_close(trunc_weights[0], torch.stack([weights[0, 0], torch.tensor(0.0)]))
    torch.testing.assert_close(trunc_weights[1], weights[1])  # an in-budget token is untouched
    _, renormalised = apply_budget_truncation(ids, weights, mask, renormalize=True)
    torch.testing.assert_close(renormalised[0], torch.tensor([1.0, 0.0]))


def test_truncation_of_a_token_with_no_expert_left_gives_zero_weights():
    ids = torch.tensor([[1, 2]])
    weights = torch.tensor([[0.7, 0.3]])
    mask = torch.tensor([True, False, False])
    for renormalize in (False, True):
        _, out = apply_budget_truncation(ids, weights, mask, renormalize=renormalize)
        assert torch.equal(out, torch.zeros(1, 2))


def test_substitution_with_the_full_budget_is_plain_routing():
    logits = torch.randn(6, 8, generator=torch.Generator().manual_seed(5))
    everything = torch.ones(8, dtype=torch.bool)
    for got, want in zip(apply_budget_substitution(logits, everything, 3), route_topk(logits, 3), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: select_budget_experts(torch.rand(3, 4), 0), "budget"),
        (lambda: select_budget_experts(torch.rand(3, 4), 5), "budget"),
        (lambda: select_budget_experts(torch.rand(4), 2), r"\[T, E\]"),
        (lambda: select_budget_experts(torch.rand(3, 4), 2, token_weights=torch.ones(2)), "token_weights"),
        (
            lambda: apply_budget_substitution(torch.rand(3, 4), torch.tensor([True, False, False, False]), 2),
            "k <= budget",
        ),
        (lambda: apply_budget_substitution(torch.rand(3, 4), torch.ones(4), 2), "bool"),
        (lambda: apply_budget_substitution(torch.rand(3, 4), torch.ones(3, dtype=torch.bool), 2), "3 entries"),
        (lambda: route_topk(torch.rand(3, 4), 5), "k must be"),
        (
            lambda: moe_forward(*make_inputs(2, 8, 4, 4, 2)[:3], torch.tensor([[0, 4], [1, 2]]), torch.ones(2, 2)),
            "topk_ids",
        ),
        (lambda: moe_forward(torch.rand(2, 9), *make_inputs(2, 8, 4, 4, 2)[1:]), "w13"),
        (
            lambda: moe_forward(*make_inputs(2, 8, 4, 4, 2)[:2], torch.rand(4, 8, 5), *make_inputs(2, 8, 4, 4, 2)[3:]),
            "w2",
        ),
        (lambda: moe_forward(*make_inputs(2, 8, 4, 4, 2)[:3], torch.zeros(2, 2), torch.ones(2, 2)), "integer"),
    ],
)
def test_bad_input_is_rejected_clearly(call, message):
    with pytest.raises(ValueError, match=message):
        call()
