import functools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from service.models.tokenizer import EOS, encode_documents, train_tokenizer

TEXTS = {
    "python": ["def add(a, b):\n    return a + b\n" * 20, "import os\nprint(os.getcwd())\n" * 20],
    "prose": ["The quick brown fox jumps over the lazy dog. " * 30],
    "arithmetic": ["12 + 34 = 46\n1494 - 1318 = 176\n" * 30],
}


@functools.cache
def _tokenizer():
    return train_tokenizer(TEXTS, vocab_size=320)


def test_digits_are_single_tokens():
    tokenizer = _tokenizer()
    ids = tokenizer.encode("1494").ids
    assert len(ids) == 4


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=60))
def test_round_trip(text):
    tokenizer = _tokenizer()
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False).ids) == text


def test_encode_documents_appends_eos():
    tokenizer = _tokenizer()
    ids = encode_documents(tokenizer, ["abc", "def"])
    eos = tokenizer.token_to_id(EOS)
    assert ids.dtype == np.uint16
    assert (ids == eos).sum() == 2 and ids[-1] == eos
