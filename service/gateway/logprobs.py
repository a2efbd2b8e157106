"""Logprobs as OpenAI returns them, from what SGLang sends.

SGLang's completions fill `text_offset` with -1; OpenAI's is each token's character offset in the choice's text
(the prompt's too, with `echo`), counted across the chunks of a stream. A request that asked for logprobs and got a
choice without them is an engine fault, reported, never relayed as a silent null.
"""

from __future__ import annotations

from service.gateway.errors import GatewayError
from service.gateway.schemas import ChatCompletionRequest, CompletionRequest


def asked(body: CompletionRequest | ChatCompletionRequest) -> bool:
    return bool(body.logprobs) if isinstance(body, ChatCompletionRequest) else body.logprobs is not None


def fill_text_offsets(choices: list, offsets: dict[int, int]) -> None:
    """Completions choices: `text_offset` from the tokens' text; `offsets` (choice index -> characters so far)
    carries a stream's position from chunk to chunk."""
    for choice in choices:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        if not isinstance(tokens, list):
            continue
        index = choice.get("index", 0)
        at, starts = offsets.get(index, 0), []
        for token in tokens:
            starts.append(at)
            at += len(token) if isinstance(token, str) else 0
        logprobs["text_offset"] = starts
        offsets[index] = at


def check_present(choices: list) -> None:
    """Every choice of a finished answer carries its logprobs."""
    if any(isinstance(c, dict) and c.get("logprobs") is None for c in choices):
        raise GatewayError(
            502, "The engine answered without the logprobs asked for.", code="engine_error", param="logprobs"
        )
