"""Prompts of exact token counts for the served model's tokenizer, with the trace's prefix blocks reproduced.

Each prefix-block id maps to one fixed sequence of BLOCK_TOKENS tokens; a prompt is its blocks' tokens joined, the last
block cut short, so requests sharing block ids share a token prefix and the prefix cache sees the trace's real reuse
(issue 6, item 2). Text is built only from "word" tokens (a space then letters) that encode to themselves alone and
back to back; with a pre-tokenizer that splits before spaces (GPT-2/Llama-3 style byte-level BPE) joining their strings
then re-encodes to exactly the chosen tokens. `build` checks that by re-encoding and says so when a tokenizer differs.
"""

from __future__ import annotations

import random
import re
from typing import Any

from service.traces.types import BLOCK_TOKENS, TraceRequest

_WORD = re.compile(r"^ [A-Za-z]{2,}$")


class TokenizerAdapter:
    """One interface over a `tokenizers.Tokenizer` and a transformers tokenizer: ids in/out, no special tokens."""

    def __init__(self, tokenizer: Any):
        self._tok = tokenizer
        self._is_raw = hasattr(tokenizer, "get_vocab_size")  # tokenizers.Tokenizer, not a transformers wrapper

    def vocab_size(self) -> int:
        return self._tok.get_vocab_size() if self._is_raw else len(self._tok)

    def encode(self, text: str) -> list[int]:
        if self._is_raw:
            return self._tok.encode(text, add_special_tokens=False).ids
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode_one(self, token_id: int) -> str:
        return self._tok.decode([token_id])


class PromptBuilder:
    """Builds prompt text of an exact token count from a request's prefix-block ids."""

    def __init__(self, tokenizer: Any, seed: int = 0, pool_size: int = 2000, min_pool: int = 32):
        self._tok = TokenizerAdapter(tokenizer)
        self._seed = seed
        self._pool = self._word_pool(pool_size)
        if len(self._pool) < min_pool:
            raise ValueError(
                f"tokenizer has only {len(self._pool)} usable word tokens (' ' + letters that re-encode to themselves); "
                f"need {min_pool} to synthesise prompts"
            )
        self._blocks: dict[int, list[int]] = {}

    def block_tokens(self, block_id: int) -> list[int]:
        """The fixed BLOCK_TOKENS token ids of one prefix block."""
        block = self._blocks.get(block_id)
        if block is None:
            rng = random.Random(self._seed * 1_000_003 + block_id)
            block = [rng.choice(self._pool)[0] for _ in range(BLOCK_TOKENS)]
            self._blocks[block_id] = block
        return block

    def token_ids(self, request: TraceRequest) -> list[int]:
        """The request's prompt as token ids: its blocks in order, the last one cut to the remainder."""
        if request.input_tokens < 1:
            raise ValueError(f"a prompt needs at least 1 token, got {request.input_tokens}")
        if len(request.prefix_blocks) * BLOCK_TOKENS < request.input_tokens:
            raise ValueError(
                f"{len(request.prefix_blocks)} prefix blocks cannot cover {request.input_tokens} tokens "
                f"({BLOCK_TOKENS} tokens per block)"
            )
        ids: list[int] = []
        for block_id in request.prefix_blocks:
            ids.extend(self.block_tokens(block_id)[: request.input_tokens - len(ids)])
            if len(ids) == request.input_tokens:
                break
        return ids

    def build(self, request: TraceRequest, verify: bool = True) -> str:
        """Prompt text of exactly `request.input_tokens` tokens; with verify, re-encodes to prove it."""
        ids = self.token_ids(request)
        text = "".join(self._text[i] for i in ids)
        if verify:
            again = self._tok.encode(text)
            if again != ids:
                raise ValueError(
                    f"synthesised prompt re-encodes to {len(again)} tokens, not the {len(ids)} chosen; this tokenizer "
                    "merges or splits word tokens across boundaries"
                )
        return text

    def _word_pool(self, pool_size: int) -> list[tuple[int, str]]:
        pool: list[tuple[int, str]] = []
        self._text: dict[int, str] = {}
        for token_id in range(self._tok.vocab_size()):
            text = self._tok.decode_one(token_id)
            if not _WORD.match(text):
                continue
            # Stable alone and back to back: then any sequence of pool words re-encodes to itself.
            if self._tok.encode(text) != [token_id] or self._tok.encode(text + text) != [token_id, token_id]:
                continue
            pool.append((token_id, text))
            self._text[token_id] = text
            if len(pool) == pool_size:
                break
        return pool
