"""Prompt-lookup (n-gram) drafting and greedy verification, to measure per-domain acceptance (issue 3).

Drafter: take the longest suffix of the context of length n in [min_ngram, max_ngram] that occurred earlier in the
context; propose the k tokens that followed its most recent earlier occurrence. Verification is greedy: a draft
token is accepted while it equals the target's argmax, and each forward also yields one target token, so the
output is exactly greedy decoding's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


def propose(context: Sequence[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to k draft tokens copied from the context, or [] when no suffix n-gram recurs."""
    if k <= 0 or min_ngram < 1 or max_ngram < min_ngram:
        raise ValueError(f"bad prompt-lookup settings k={k} ngram=[{min_ngram}, {max_ngram}]")
    tokens = list(context)
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):  # most recent earlier occurrence first
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


@dataclass(frozen=True)
class LookupResult:
    tokens: list[int]  # generated token ids (exactly greedy decoding's)
    proposed: int  # draft tokens proposed
    accepted: int  # draft tokens accepted
    forwards: int  # target forward passes


def speculative_greedy(
    next_tokens: Callable[[list[int]], list[int]], prompt: list[int], new_tokens: int, k: int = 3
) -> LookupResult:
    """next_tokens(ids) returns the target's argmax after every prefix ids[:i+1], i.e. len(ids) predictions."""
    ids, proposed, accepted, forwards = list(prompt), 0, 0, 0
    while len(ids) - len(prompt) < new_tokens:
        draft = propose(ids, min(k, new_tokens - (len(ids) - len(prompt))))
        predictions = next_tokens(ids + draft)[len(ids) - 1 :]  # target choice after ids, ids+d1, ...
        forwards += 1
        n_ok = 0
        while n_ok < len(draft) and draft[n_ok] == predictions[n_ok]:
            n_ok += 1
        proposed += len(draft)
        accepted += n_ok
        ids += draft[:n_ok] + [predictions[n_ok]]
    return LookupResult(ids[len(prompt) : len(prompt) + new_tokens], proposed, accepted, forwards)
