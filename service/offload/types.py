"""The nouns of expert offloading: keys, lookahead entries, store counters and per-cycle measurements."""

from __future__ import annotations

from dataclasses import dataclass, fields

ExpertKey = tuple[int, int]  # (MoE layer index, expert index within the layer)


@dataclass(frozen=True)
class LookaheadEntry:
    """One ELB cell (MoE-SpeQ §3.3.1): the draft routed draft token `token` at `layer` to `expert`."""

    token: int  # position in the draft window, 0 = the first token the draft ran on
    layer: int  # MoE layer index
    expert: int  # expert index within the layer
    confidence: float  # the draft router's top-k weight for this expert, in [0, 1]


@dataclass(frozen=True)
class StoreStats:
    """Cumulative counters of an ExpertStore; subtract two snapshots for one window."""

    requests: int = 0  # expert lookups by the forward pass
    hits: int = 0  # lookups served from the resident set without waiting
    late_hits: int = 0  # lookups that waited for a prefetch already in flight
    misses: int = 0  # lookups that fetched on demand
    stall_s: float = 0.0  # seconds the forward pass waited for experts (late hits + misses)
    fetches: int = 0  # experts copied from the slow tier (demand + prefetch)
    prefetches: int = 0  # of which issued by the prefetcher
    fetch_s: float = 0.0  # seconds spent copying, summed over fetches
    fetch_bytes: int = 0  # bytes copied from the slow tier
    evictions: int = 0  # experts dropped from the resident set

    def __add__(self, other: StoreStats) -> StoreStats:
        return StoreStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __sub__(self, other: StoreStats) -> StoreStats:
        return StoreStats(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    @property
    def hit_rate(self) -> float:
        """Share of lookups found resident; 1.0 when there were none (nothing was missing)."""
        return self.hits / self.requests if self.requests else 1.0

    @property
    def bandwidth(self) -> float | None:
        """Measured slow-tier bandwidth in bytes per second; None before the first fetch."""
        return self.fetch_bytes / self.fetch_s if self.fetch_s > 0 else None


@dataclass(frozen=True)
class CycleStats:
    """One draft-then-verify cycle of the speculative loop (k = 0: a plain decode step)."""

    k: int  # draft tokens proposed
    accepted: int  # draft tokens accepted (the bonus token not counted)
    draft_s: float  # seconds drafting
    verify_s: float  # seconds in the target forward, stalls included
    verify: StoreStats  # store counters during the target forward
    window: StoreStats  # store counters over the whole cycle (prefetches during drafting included)
