"""Shared fixtures: the real trace files beside the repository, and a tiny in-process BPE tokenizer."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# CI clones shared/ beside the repository; MOE_SERVE_TRACES_DIR points elsewhere (e.g. from a git worktree).
TRACES_DIR = Path(os.environ.get("MOE_SERVE_TRACES_DIR") or REPO_ROOT.parent / "shared" / "traces")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES_DIR.is_dir():
        pytest.skip(f"real trace files not found at {TRACES_DIR} (CI clones shared/ beside the repository)")
    return TRACES_DIR


def train_tiny_bpe(vocab_size: int = 600):
    """A byte-level BPE trained in-process on made-up words: enough vocabulary for prompt synthesis, no downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "de", "fu", "ga", "zo"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(400)]
    corpus = [" ".join(rng.choice(words) for _ in range(50)) for _ in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return train_tiny_bpe()


@pytest.fixture(scope="session")
def tiny_tokenizer_file(tiny_tokenizer, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tiny_tokenizer.save(str(path))
    return path
