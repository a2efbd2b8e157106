"""Arrival-only traces: a CSV whose single column is `Timestamp` (AdaSpec's traces are these: arrival times cut from
BurstGPT and Mooncake, without token counts), and the token lengths their requests are given.

Timestamps are numbers in seconds (`unit_s=0.001` for milliseconds) or Azure-style `YYYY-MM-DD hh:mm:ss[.fffffff]`;
arrivals are rebased to the first. Lengths come from `Lengths`: (input, output) pairs drawn jointly, with
replacement and a seed, from another trace's requests (its empirical distribution, the correlation between a
prompt's length and its answer's kept), and/or fixed values, a fixed value replacing its column of the draw.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from service.traces.azure import parse_ticks
from service.traces.types import Schedule, TraceRequest, blocks_for, private_blocks

HEADER = "Timestamp"


@dataclass(frozen=True)
class Lengths:
    """Token lengths for requests whose trace records none."""

    pairs: tuple[tuple[int, int], ...] = ()  # (input, output) tokens of another trace's requests, drawn from
    input_tokens: int | None = None  # tokens, fixed prompt length (replaces the drawn one)
    output_tokens: int | None = None  # tokens, fixed output length (replaces the drawn one)
    seed: int = 0  # of the draw
    source: str = ""  # where the pairs came from, for the schedule's name

    def __post_init__(self) -> None:
        if not self.pairs and (self.input_tokens is None or self.output_tokens is None):
            raise ValueError("lengths need a trace to draw from, or both a fixed input and a fixed output length")
        if self.input_tokens is not None and self.input_tokens < 1:
            raise ValueError(f"fixed input length must be >= 1 token, got {self.input_tokens}")
        if self.output_tokens is not None and self.output_tokens < 1:
            raise ValueError(f"fixed output length must be >= 1 token, got {self.output_tokens}")

    def draw(self, n: int) -> list[tuple[int, int]]:
        rng = random.Random(self.seed)
        drawn = [rng.choice(self.pairs) for _ in range(n)] if self.pairs else [(0, 0)] * n
        return [(self.input_tokens or i, self.output_tokens or o) for i, o in drawn]

    def describe(self) -> str:
        parts = [f"from {self.source}"] if self.pairs else []
        parts += [f"in={self.input_tokens}"] if self.input_tokens else []
        parts += [f"out={self.output_tokens}"] if self.output_tokens else []
        return ",".join(parts)


def lengths_from(
    schedule: Schedule | None = None,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    seed: int = 0,
) -> Lengths:
    """Lengths drawn from `schedule`'s requests (failed ones, with no output, left out) and/or fixed."""
    pairs = () if schedule is None else tuple((r.input_tokens, r.output_tokens) for r in schedule.requests)
    pairs = tuple(p for p in pairs if p[1] > 0)
    if schedule is not None and not pairs:
        raise ValueError(f"{schedule.source}: no request with an output to draw lengths from")
    source = "" if schedule is None else schedule.source
    return Lengths(pairs, input_tokens, output_tokens, seed, source)


def load_arrivals(path: str | Path, lengths: Lengths, unit_s: float = 1.0) -> Schedule:
    """Read an arrival-only CSV; request i gets the i-th drawn lengths (in arrival order)."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as f:
        lines = f.read().splitlines()
    if not lines or lines[0].strip().strip('"') != HEADER:
        raise ValueError(f"{path}: expected a single {HEADER!r} column")
    times = sorted(_seconds(line, unit_s, f"{path}:{n}") for n, line in enumerate(lines[1:], start=2) if line.strip())
    if not times:
        raise ValueError(f"{path}: no requests")
    requests, next_block = [], 0
    for t, (n_in, n_out) in zip(times, lengths.draw(len(times)), strict=True):
        requests.append(TraceRequest(t - times[0], n_in, n_out, private_blocks(next_block, n_in)))
        next_block += blocks_for(n_in)
    return Schedule(tuple(requests), f"arrivals:{path.name}({lengths.describe()})")


def _seconds(line: str, unit_s: float, where: str) -> float:
    text = line.strip().strip('"')
    if "," in text:
        raise ValueError(f"{where}: expected one column, got {text!r}")
    try:
        value = float(text) * unit_s
    except ValueError:
        try:
            return parse_ticks(text) / 10_000_000  # Azure-style date and time, 100 ns ticks
        except ValueError:
            raise ValueError(f"{where}: bad timestamp {text!r}") from None
    if value < 0:
        raise ValueError(f"{where}: negative timestamp {text!r}")
    return value
