"""Builders for policy tests: batches and step stats from a few numbers."""

from __future__ import annotations

from service.policy.types import BatchView, RequestStepStats, RequestView, SloClass, StepStats


def batch(
    n: int,
    max_k: int = 7,
    tpot_s: float | None = None,
    confidences: tuple[float, ...] = (),
    prefix: str = "r",
    context: int = 500,
    layout: str = "ragged",
) -> BatchView:
    slo = None if tpot_s is None else SloClass("test", tpot_s=tpot_s)
    return BatchView(
        now=0.0,
        requests=tuple(
            RequestView(f"{prefix}{i}", slo=slo, context_len=context, draft_confidences=confidences) for i in range(n)
        ),
        max_k=max_k,
        verify_layout=layout,
    )


def stats(
    ks: list[int], accepted: list[int], step_s: float, prefix: str = "r", unique: tuple[int, ...] = ()
) -> StepStats:
    return StepStats(
        now=0.0,
        batch_size=len(ks),
        requests=tuple(
            RequestStepStats(f"{prefix}{i}", k, a) for i, (k, a) in enumerate(zip(ks, accepted, strict=True))
        ),
        draft_s=0.0,
        verify_s=step_s * 0.9,
        other_s=step_s * 0.1,
        unique_experts=unique,
        draft_steps=max(ks, default=0),
    )
