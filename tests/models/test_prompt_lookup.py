import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.models.prompt_lookup import propose, speculative_greedy


@pytest.mark.parametrize(
    "context,k,expected",
    [
        ([1, 2, 3, 9, 1, 2, 3], 2, [9, 1]),  # 3-gram [1,2,3] recurs
        ([5, 6, 7, 5, 6], 3, [7, 5, 6]),  # 2-gram [5,6]
        ([4, 8, 4], 2, [8, 4]),  # 1-gram fallback
        ([1, 2, 3, 4], 3, []),  # nothing recurs
        ([7, 1, 2, 8, 1, 2], 1, [8]),  # most recent earlier occurrence wins
    ],
)
def test_propose_table(context, k, expected):
    assert propose(context, k) == expected


def test_propose_rejects_bad_settings():
    with pytest.raises(ValueError):
        propose([1, 2], 0)


def _toy_target(vocab: int, salt: int):
    """A deterministic 'model': next token is a function of the last two tokens."""

    def next_tokens(ids):
        return [((ids[max(0, i - 1)] * 7 + ids[i] * 3 + salt) % vocab) for i in range(len(ids))]

    return next_tokens


@settings(max_examples=50, deadline=None)
@given(
    prompt=st.lists(st.integers(0, 5), min_size=1, max_size=20),
    vocab=st.integers(2, 6),
    salt=st.integers(0, 5),
    k=st.integers(1, 4),
)
def test_speculation_reproduces_plain_greedy(prompt, vocab, salt, k):
    target = _toy_target(vocab, salt)
    ids = list(prompt)
    for _ in range(15):
        ids.append(target(ids)[-1])
    result = speculative_greedy(target, prompt, 15, k)
    assert result.tokens == ids[len(prompt) :]
    assert 0 <= result.accepted <= result.proposed
    assert result.forwards <= 15
