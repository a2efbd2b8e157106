"""Which resident expert to drop: LRU (the reactive baseline) or lookahead-aware (MoE-SpeQ §3.3).

Lookahead-aware rule, Belady's with the ELB as the oracle: an expert the coming verify does not need goes first (least
recently used among those); only if every candidate is needed does the one needed farthest ahead go (largest
layer distance, verify runs layer by layer). A prefetch may evict only an expert needed strictly later than the one it
brings in (`admits`), so prefetching never pushes out something verify reaches sooner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from service.offload.types import ExpertKey


class NextUse(Protocol):
    def next_use(self, key: ExpertKey) -> int | None:
        """Layers until the coming verify needs `key`; None when it does not."""
        ...


class EvictionPolicy(Protocol):
    name: str

    def victim(self, candidates: Sequence[ExpertKey], last_use: Mapping[ExpertKey, int]) -> ExpertKey:
        """The candidate to evict; `last_use` holds a logical time of each key's latest lookup."""
        ...

    def admits(self, incoming: ExpertKey, victim: ExpertKey) -> bool:
        """Whether a prefetch of `incoming` may evict `victim`."""
        ...


class LruEviction:
    name = "lru"

    def victim(self, candidates: Sequence[ExpertKey], last_use: Mapping[ExpertKey, int]) -> ExpertKey:
        _check(candidates)
        return min(candidates, key=lambda key: (last_use.get(key, -1), key))

    def admits(self, incoming: ExpertKey, victim: ExpertKey) -> bool:
        return True


class LookaheadEviction:
    name = "lookahead"

    def __init__(self, lookahead: NextUse):
        self._lookahead = lookahead

    def victim(self, candidates: Sequence[ExpertKey], last_use: Mapping[ExpertKey, int]) -> ExpertKey:
        _check(candidates)
        return max(candidates, key=lambda key: (self._distance(key), -last_use.get(key, -1), key))

    def admits(self, incoming: ExpertKey, victim: ExpertKey) -> bool:
        return self._distance(victim) > self._distance(incoming)

    def _distance(self, key: ExpertKey) -> float:
        use = self._lookahead.next_use(key)
        return float("inf") if use is None else float(use)


def _check(candidates: Sequence[ExpertKey]) -> None:
    if not candidates:
        raise ValueError("no eviction candidates: every resident expert is pinned or loading")
