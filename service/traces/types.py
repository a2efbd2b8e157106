"""The nouns of trace replay: one request of a trace, and a schedule of them (issue 6).

Every trace format is normalised to `Schedule`; every transform in `schedule.py` maps a `Schedule` to a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

# Mooncake's prefix blocks are 512 tokens (FAST'25 trace README); the other formats get private blocks of the same size.
BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # seconds from the schedule's start
    input_tokens: int  # tokens in the prompt
    output_tokens: int  # tokens to generate; 0 marks a request that failed in the trace (BurstGPT)
    prefix_blocks: tuple[int, ...]  # ids of BLOCK_TOKENS-token prompt blocks; equal ids mean identical blocks
    session: str | None = None  # conversation id where the trace has one, else None


@dataclass(frozen=True)
class Schedule:
    requests: tuple[TraceRequest, ...]  # sorted by arrival_s
    source: str  # where it came from and what was done to it, e.g. "mooncake[0:60]/x2"

    def __post_init__(self) -> None:
        arrivals = [r.arrival_s for r in self.requests]
        if any(b < a for a, b in zip(arrivals, arrivals[1:], strict=False)):
            raise ValueError(f"schedule {self.source!r}: requests are not sorted by arrival time")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_s(self) -> float:  # seconds from the first to the last arrival
        if not self.requests:
            return 0.0
        return self.requests[-1].arrival_s - self.requests[0].arrival_s


def private_blocks(first_id: int, input_tokens: int) -> tuple[int, ...]:
    """Fresh block ids for a request whose trace records no prefix sharing: nothing else will share them."""
    return tuple(range(first_id, first_id + blocks_for(input_tokens)))


def blocks_for(input_tokens: int) -> int:
    """Number of BLOCK_TOKENS blocks covering `input_tokens` (the last one possibly short)."""
    return -(-input_tokens // BLOCK_TOKENS)
