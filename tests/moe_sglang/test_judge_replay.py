"""A judgement's outcomes (moe_sglang/draft_judge.py): the emitted tokens replayed as speculation at the
drafter's depth would have verified them, one outcome per chain, so a token the draft cannot predict counts once."""

from moe_sglang.draft_judge import replayed


def test_each_chain_starts_after_the_previous_one_ends():
    # roots 0..6; depth 3: chain at 0 accepts 3 (bonus at 4), chain at 4 is rejected at once, chain at 5 accepts
    # the one token left to judge
    hits = [True, True, True, False, False, True, True]
    assert replayed(hits, 3) == [(3, 3), (1, 0), (2, 2)]


def test_a_hard_token_is_one_rejection_not_one_per_chain_reaching_it():
    # the token after root 3 is unpredictable: chains at roots 0..3 would all reach it; a verify meets it once
    hits = [True, True, True, False, True, True]
    chains = replayed(hits, 4)
    assert chains == [(4, 3), (2, 2)]
    assert sum(k - a for k, a in chains) == 1


def test_no_outcome_without_a_root_and_all_misses_one_each():
    assert replayed([], 3) == []
    assert replayed([False] * 4, 3) == [(1, 0)] * 4


def test_gated_chains_end_above_the_first_draft_the_head_doubts():
    """With the acceptance head's verdicts (keeps), a chain is replayed as the stop verifies it: it ends above its
    first doubted draft (all of it accepted: the next chain starts after the bonus), a chain whose first draft is
    doubted is a plain step with no outcome, and a doubted draft that would have been rejected costs nothing."""
    hits = [True, True, True, False, False, True, True]
    keeps = [True, False, True, True, False, True, True]
    # root 0: keeps draft 0 only (1, 1), bonus at 1; root 2: drafts 2, 3 kept, 3 rejected (2, 1); root 4: doubted,
    # plain; root 5: (2, 2)
    assert replayed(hits, 3, keeps) == [(1, 1), (2, 1), (2, 2)]
    assert replayed(hits, 3, [True] * len(hits)) == replayed(hits, 3)
    assert replayed(hits, 3, [False] * len(hits)) == []
