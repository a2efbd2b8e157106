"""Schedule transforms for scaling a real trace to a test bed (shared/traces/README.md, "Replaying them faithfully").

Each transform is pure: a `Schedule` in, a new `Schedule` out. Load is raised by compressing time, lowered by thinning
whole sessions, or multiplied by overlaying shifted copies whose prefix blocks are disjoint (so copies cannot create
prefix-cache hits the trace never had).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Literal

from service.traces.types import Schedule, TraceRequest, blocks_for


def window(schedule: Schedule, start_s: float, end_s: float) -> Schedule:
    """Requests with start_s <= arrival < end_s, re-timed so start_s becomes 0."""
    if not 0 <= start_s < end_s:
        raise ValueError(f"window needs 0 <= start < end, got {start_s}:{end_s}")
    kept = tuple(
        replace(r, arrival_s=r.arrival_s - start_s) for r in schedule.requests if start_s <= r.arrival_s < end_s
    )
    return Schedule(kept, f"{schedule.source}[{start_s:g}:{end_s:g}]")


def parse_window(text: str) -> tuple[float, float]:
    """`"600:660"` -> (600.0, 660.0); either side may be empty (`":60"`, `"600:"`)."""
    start, sep, end = text.partition(":")
    if not sep:
        raise ValueError(f"window must be START:END in seconds, got {text!r}")
    try:
        return float(start or 0.0), float(end or "inf")
    except ValueError:
        raise ValueError(f"window must be START:END in seconds, got {text!r}") from None


def compress(schedule: Schedule, time_scale: float) -> Schedule:
    """Divide every arrival time by `time_scale`: 2.0 replays the trace twice as fast (twice the request rate)."""
    if not time_scale > 0:
        raise ValueError(f"time scale must be > 0, got {time_scale}")
    scaled = tuple(replace(r, arrival_s=r.arrival_s / time_scale) for r in schedule.requests)
    return Schedule(scaled, f"{schedule.source}/x{time_scale:g}")


def thin(schedule: Schedule, fraction: float, seed: int = 0) -> Schedule:
    """Keep a random `fraction` of sessions (requests without a session count as their own session).

    Whole sessions are kept or dropped together so a kept conversation keeps all its turns.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"thinning fraction must be in (0, 1], got {fraction}")
    keys = [r.session if r.session is not None else ("#", i) for i, r in enumerate(schedule.requests)]
    rng = random.Random(seed)
    # Decide per distinct key in first-seen order, so the outcome depends only on the seed and the trace.
    keep: dict[object, bool] = {}
    for key in keys:
        if key not in keep:
            keep[key] = rng.random() < fraction
    kept = tuple(r for r, key in zip(schedule.requests, keys, strict=True) if keep[key])
    return Schedule(kept, f"{schedule.source}/thin{fraction:g}")


def overlay(schedule: Schedule, copies: int, shift_s: float) -> Schedule:
    """Merge `copies` copies, copy c shifted by c * shift_s, each with its own prefix-block id range and sessions."""
    if copies < 1 or shift_s < 0:
        raise ValueError(f"overlay needs copies >= 1 and shift >= 0, got {copies}, {shift_s}")
    span = 1 + max((b for r in schedule.requests for b in r.prefix_blocks), default=-1)
    merged = []
    for c in range(copies):
        for r in schedule.requests:
            merged.append(
                TraceRequest(
                    arrival_s=r.arrival_s + c * shift_s,
                    input_tokens=r.input_tokens,
                    output_tokens=r.output_tokens,
                    prefix_blocks=tuple(b + c * span for b in r.prefix_blocks),
                    session=None if r.session is None else f"{r.session}#{c}" if c else r.session,
                )
            )
    merged.sort(key=lambda r: r.arrival_s)  # stable: ties keep copy order
    return Schedule(tuple(merged), f"{schedule.source}/overlay{copies}x{shift_s:g}")


@dataclass(frozen=True)
class ContextFit:
    clipped: int  # requests whose input was cut to fit
    skipped: int  # requests left out because they did not fit
    context_tokens: int  # the model's context length the schedule was fitted to


def fit_context(
    schedule: Schedule, context_tokens: int, mode: Literal["clip", "skip"] = "clip"
) -> tuple[Schedule, ContextFit]:
    """Make every request fit `input + output <= context_tokens`.

    clip: cut the input to `context_tokens - output` (keeping its leading prefix blocks); a request whose output alone
    leaves no room for one input token is skipped. skip: leave every request that does not fit out.
    """
    if context_tokens < 2:
        raise ValueError(f"context must be at least 2 tokens, got {context_tokens}")
    if mode not in ("clip", "skip"):
        raise ValueError(f"context mode must be clip or skip, got {mode!r}")
    kept, clipped, skipped = [], 0, 0
    for r in schedule.requests:
        if r.input_tokens + r.output_tokens <= context_tokens:
            kept.append(r)
            continue
        room = context_tokens - r.output_tokens
        if mode == "skip" or room < 1:
            skipped += 1
            continue
        clipped += 1
        kept.append(replace(r, input_tokens=room, prefix_blocks=r.prefix_blocks[: blocks_for(room)]))
    fitted = Schedule(tuple(kept), f"{schedule.source}/ctx{context_tokens}{mode}")
    return fitted, ContextFit(clipped=clipped, skipped=skipped, context_tokens=context_tokens)


def cap_output(schedule: Schedule, max_output_tokens: int) -> tuple[Schedule, int]:
    """Cap every request's output at `max_output_tokens`; returns the schedule and how many were capped.

    For models whose context is shorter than the trace's outputs (the bundled model has 256 tokens, Mooncake's median
    output is 350): without it, fitting the context would have to skip most requests. Arrival times are kept."""
    if max_output_tokens < 1:
        raise ValueError(f"max output tokens must be >= 1, got {max_output_tokens}")
    capped = sum(r.output_tokens > max_output_tokens for r in schedule.requests)
    requests = tuple(replace(r, output_tokens=min(r.output_tokens, max_output_tokens)) for r in schedule.requests)
    return Schedule(requests, f"{schedule.source}/out{max_output_tokens}"), capped


def failed_requests(schedule: Schedule, mode: Literal["drop", "one-token"]) -> Schedule:
    """Requests that failed in the trace (output 0, BurstGPT) are dropped, or replayed as 1-token requests."""
    if mode == "drop":
        kept = tuple(r for r in schedule.requests if r.output_tokens > 0)
    elif mode == "one-token":
        kept = tuple(r if r.output_tokens > 0 else replace(r, output_tokens=1) for r in schedule.requests)
    else:
        raise ValueError(f"failed-request mode must be drop or one-token, got {mode!r}")
    return Schedule(kept, f"{schedule.source}/failed-{mode}")
