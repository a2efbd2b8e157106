"""Prompt synthesis: exact token counts (checked by re-encoding) and reproduced prefix blocks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.traces.prompts import PromptBuilder
from service.traces.types import BLOCK_TOKENS, TraceRequest, blocks_for


@pytest.fixture(scope="module")
def builder(tiny_tokenizer):
    return PromptBuilder(tiny_tokenizer, seed=3)


def _request(n_in: int, blocks: tuple[int, ...]) -> TraceRequest:
    return TraceRequest(arrival_s=0.0, input_tokens=n_in, output_tokens=1, prefix_blocks=blocks)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3 * BLOCK_TOKENS), st.integers(0, 1000))
def test_exact_token_count_by_reencoding(tiny_tokenizer, n_in, first_block):
    builder = PromptBuilder(tiny_tokenizer, seed=1)
    request = _request(n_in, tuple(range(first_block, first_block + blocks_for(n_in))))
    text = builder.build(request)
    assert len(tiny_tokenizer.encode(text, add_special_tokens=False).ids) == n_in


def test_shared_block_ids_share_a_token_prefix(builder, tiny_tokenizer):
    a = builder.token_ids(_request(1200, (0, 1, 2)))
    b = builder.token_ids(_request(700, (0, 1)))  # same first two blocks, the second cut to 188 tokens
    c = builder.token_ids(_request(600, (5, 1)))
    assert b == a[:700]
    assert a[:BLOCK_TOKENS] != c[:BLOCK_TOKENS] and c[BLOCK_TOKENS:] == a[BLOCK_TOKENS:600]
    # The text of a shared prefix is a prefix of the text, so the server's tokenizer sees the same tokens.
    assert builder.build(_request(1200, (0, 1, 2))).startswith(builder.build(_request(700, (0, 1))))


def test_same_seed_same_prompt_other_seed_other_prompt(tiny_tokenizer):
    r = _request(100, (4,))
    assert PromptBuilder(tiny_tokenizer, seed=9).build(r) == PromptBuilder(tiny_tokenizer, seed=9).build(r)
    assert PromptBuilder(tiny_tokenizer, seed=9).build(r) != PromptBuilder(tiny_tokenizer, seed=8).build(r)


def test_works_through_a_transformers_tokenizer(tiny_tokenizer):
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tiny_tokenizer)
    text = PromptBuilder(wrapped).build(_request(777, (0, 1)))
    assert len(wrapped.encode(text, add_special_tokens=False)) == 777


def test_too_few_blocks_or_tokens_are_rejected(builder):
    with pytest.raises(ValueError, match="cannot cover"):
        builder.token_ids(_request(600, (0,)))
    with pytest.raises(ValueError, match="at least 1 token"):
        builder.token_ids(_request(0, ()))


def test_tokenizer_without_word_tokens_is_rejected():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ValueError, match="usable word tokens"):
        PromptBuilder(tok)
