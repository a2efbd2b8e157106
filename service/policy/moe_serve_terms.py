"""The per-request terms moe-serve prices a step with (moe_serve.py's docstring has the rule): expected tokens of a
draft chain, the objective's sort key, and the caps and shares that a request's remaining life sets."""

from __future__ import annotations

from service.policy.types import RequestView


def life_cap(k: int, r: RequestView) -> int:
    """No more drafts than the request has tokens left after the step's own (they could never be emitted)."""
    return k if r.tokens_left is None else max(min(k, r.tokens_left - 1), 0)


def amortized(requests: tuple[RequestView, ...], chains: list[list[float]]) -> list[float]:
    """Each request's draft backlog as one step's share: the catch-up is paid once and serves the rest of the
    request's life, about tokens_left / e steps at its best expected tokens per step e (the whole backlog when the
    request's length is unknown)."""
    out = []
    for r, c in zip(requests, chains, strict=True):
        steps = 1.0 if r.tokens_left is None else max(r.tokens_left / (1.0 + sum(c)), 1.0)
        out.append(r.draft_backlog / steps)
    return out


def sort_key(step_s: float, harmonic: float, requests: int, cap_s: float) -> tuple[int, float]:
    """(0, J) within the SLO, (1, J) over it; J = T · Σ_r 1/e_r, the batch's mean expected TPOT times B."""
    j = step_s * harmonic
    return (1, j) if j > cap_s * max(requests, 1) else (0, j)


def chain(p: list[float], depth: int) -> list[float]:
    """[Π_{j<=i} p_j for i = 1..depth]: what the i-th draft adds to the expected tokens; missing p reuse the last."""
    out, run = [], 1.0
    for i in range(depth):
        run *= p[i] if i < len(p) else (p[-1] if p else 0.0)
        out.append(run)
    return out
