"""Byte-level BPE tokenizer for the embedded model, and corpus → token-id arrays (issue 3).

Digits are split one per token before BPE: otherwise "1494" and "149" become unrelated tokens and the model
cannot learn column-wise arithmetic at this size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.models.corpus import DOC_SEPARATOR, DOMAINS, read_split

EOS = DOC_SEPARATOR


def train_tokenizer(texts_by_domain: dict[str, list[str]], vocab_size: int = 8192, sample_chars: int = 6_000_000):
    """Train on up to `sample_chars` characters per domain so no domain dominates the merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 300:
        raise ValueError(f"vocab_size must cover the 256 bytes plus specials, got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def sample():
        for texts in texts_by_domain.values():
            budget = sample_chars
            for text in texts:
                if budget <= 0:
                    break
                yield text[:budget]
                budget -= len(text)

    tokenizer.train_from_iterator(sample(), trainer=trainer)
    return tokenizer


def save_hf_tokenizer(tokenizer, out_dir: Path) -> None:
    """Write tokenizer.json + tokenizer_config.json as transformers and SGLang expect them, with the chat template
    (SGLang's /v1/chat/completions refuses a model without one)."""
    from transformers import PreTrainedTokenizerFast

    from service.models.chat_template import CHAT_TEMPLATE

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=EOS, eos_token=EOS, pad_token=EOS)
    fast.model_max_length = 256
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))


def load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.exists():
        raise FileNotFoundError(f"no tokenizer at {file}")
    return Tokenizer.from_file(str(file))


def encode_documents(tokenizer, texts: list[str]) -> np.ndarray:
    """Token ids of all documents, each followed by EOS, as one flat uint16 array."""
    eos = tokenizer.token_to_id(EOS)
    if tokenizer.get_vocab_size() > 2**16:
        raise ValueError("uint16 token storage needs vocab_size <= 65536")
    pieces = []
    for enc in tokenizer.encode_batch(texts, add_special_tokens=False):
        pieces.append(np.asarray(enc.ids, dtype=np.uint16))
        pieces.append(np.asarray([eos], dtype=np.uint16))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint16)


def encode_corpus(tokenizer, corpus_dir: Path, out_dir: Path) -> dict[str, int]:
    """Write `<domain>.<split>.npy` token arrays; returns token counts by file stem."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for domain in DOMAINS:
        for split in ("train", "heldout"):
            ids = encode_documents(tokenizer, read_split(corpus_dir, domain, split))
            np.save(out_dir / f"{domain}.{split}.npy", ids)
            counts[f"{domain}.{split}"] = int(ids.size)
    return counts
