# ruff: noqa: F811 (the fixture `hf` is imported, then named by the tests that use it)
"""The draft stop by an acceptance head (moe_sglang/draft_stop.py) over the direct draft forward, against the head's
probabilities computed from transformers' own hidden states and logits (the margin's stop: test_draft_forward.py)."""

import pytest
import torch

from service.models.accept_head import EXTRA, AcceptHead
from tests.moe_sglang.test_draft_forward import REQ_TO_TOKEN, A, B, batch_of, direct_of, greedy, hf  # noqa: F401


def head_for(hf) -> AcceptHead:
    """A head that reads every feature, the hidden state's included (seeded)."""
    torch.manual_seed(3)
    return AcceptHead(torch.randn(EXTRA + hf.config.hidden_size) * 0.3, 0.5)


def chain_probabilities(hf, head: AcceptHead, tokens: list[int], n: int) -> list[float]:
    """The head's probability of each of the draft's n greedy drafts after `tokens` (transformers, float32)."""
    out, probs = [], []
    with torch.no_grad():
        for _ in range(n):
            hidden = hf.model(torch.tensor([tokens + out])).last_hidden_state[0, -1:]
            logprobs = torch.log_softmax(hf.lm_head(hidden), -1)
            probs.append(float(head.probability(logprobs, hidden)))
            out.append(int(logprobs.argmax()))
    return probs


@pytest.mark.parametrize("chain", [False, True], ids=["torch-ops", "op"])
def test_the_direct_forward_hands_over_the_lm_heads_input(hf, chain):
    """DirectDraft.logits(hidden=True): the final hidden states (after the last norm) transformers' model gives, and
    the logits it gives without them."""
    n = len(A)
    args = (
        torch.tensor(A), torch.arange(n), REQ_TO_TOKEN[0, :n].long(), REQ_TO_TOKEN, torch.tensor([0]), [0], [n],
        torch.ones(n, n, dtype=torch.bool).tril().reshape(-1), torch.arange(n), chain,
    )  # fmt: skip
    logits = direct_of(hf).logits(*args)
    pair = direct_of(hf).logits(*args, hidden=True)
    with torch.no_grad():
        expected = hf.model(torch.tensor([A])).last_hidden_state[0]
    torch.testing.assert_close(pair[0], logits, rtol=0, atol=0)
    torch.testing.assert_close(pair[1], expected, rtol=1e-4, atol=1e-4)


def test_chains_stop_at_the_first_draft_the_head_doubts(hf):
    """A chain asking the head stops at its first draft whose predicted acceptance is below accept_stop, keeps the
    drafts above it; the head is preferred to the margin (a draft_stop no draft passes is not applied) and a request
    asking neither drafts to its budget."""
    from moe_sglang.draft_model import DraftModelDrafter

    head = head_for(hf)
    cases = [
        (p[d], d, i)
        for i, prompt in enumerate((A, B))
        for p in [chain_probabilities(hf, head, prompt, 4)]
        for d in range(1, 4)
        if p[d] < min(p[:d]) - 1e-3
    ]
    assert cases, "no chain of the fixture's model falls in the head's eyes past its first draft"
    accept, stop_at, row = cases[0]
    prompts = [A, B] if row == 0 else [B, A]
    batch = batch_of(prompts, [[], []], [len(p) - 1 for p in prompts])
    drafter = DraftModelDrafter(worker=None, topk=1, max_depth=4, stride=5, direct=direct_of(hf), head=head)
    drafter.reset(["r0", "r1"])
    trees, drafting, forwards = drafter.draft(batch, [4, 2], [1e300, 0.0], [accept + 5e-4, 0.0])
    assert list(trees.drafts) == [stop_at, 2]
    assert drafting[0].kept == stop_at and drafting[1].kept is None and forwards == max(stop_at + 1, 2)
    assert [n.token for n in drafting[0].tree.nodes[1 : stop_at + 1]] == greedy(hf, prompts[0], stop_at)


@pytest.mark.parametrize("head", [False, True], ids=["no-head", "head"])
def test_without_a_head_the_margin_decides(hf, head):
    """accept_stop asks a head; a drafter without one stops by the margin where the request set draft_stop (1e300:
    every chain at its first draft), and with one the head decides alone (a floor of 1e-9: nothing stops)."""
    from moe_sglang.draft_model import DraftModelDrafter

    batch = batch_of([A, B], [[], []], [len(A) - 1, len(B) - 1])
    drafter = DraftModelDrafter(
        worker=None, topk=1, max_depth=4, stride=5, direct=direct_of(hf), head=head_for(hf) if head else None
    )
    drafter.reset(["r0", "r1"])
    trees, _, _ = drafter.draft(batch, [3, 3], [1e300, 1e300], [1e-9, 1e-9])
    assert list(trees.drafts) == ([3, 3] if head else [0, 0])


def test_judged_chains_are_gated_by_the_head_as_verified_ones(hf):
    """A judgement asked with accept_stops replays chains stopped where the head doubts (draft_judge.py, judging
    gated chains): a head that trusts every draft gives the ungated outcomes, one that doubts every draft none (every
    chain a plain step); the draft cache is caught up either way."""
    from moe_sglang.draft_judge import judge, judge_later
    from moe_sglang.draft_model import DraftModelDrafter
    from moe_sglang.draft_thread import AT_ONCE

    outputs = [greedy(hf, A, 5) + [7, 250], [1, 2, 3, 4, 5]]  # hits, then misses
    prompts = [A, B]
    decode = batch_of(prompts, outputs, [len(p) + len(o) - 1 for p, o in zip(prompts, outputs, strict=True)])
    hidden = hf.config.hidden_size

    def judged(bias):
        head = AcceptHead(torch.zeros(EXTRA + hidden), bias)
        made = DraftModelDrafter(worker=None, topk=1, max_depth=3, stride=4, direct=direct_of(hf), head=head)
        made.reset(["r0", "r1"])
        return judge_later(made, decode, [0, 1], AT_ONCE, [0.5, 0.5])(), made.seen

    plain = DraftModelDrafter(worker=None, topk=1, max_depth=3, stride=4, direct=direct_of(hf))
    plain.reset(["r0", "r1"])
    ungated = judge(plain, decode, [0, 1])
    assert ungated[0] and judged(50.0) == (ungated, plain.seen)
    (none, ran), seen = judged(-50.0)
    assert none == () and ran == ungated[1] and seen == plain.seen
