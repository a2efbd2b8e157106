"""MoE-Spec's expert budget for verification: per MoE layer keep only the B best experts of the verify batch.

  score_e = Σ_t w_t · g_te      router probability g of expert e for verify token t, summed over the draft tokens
                                 (w_t = 1; the author's later fork uses w_t = 0.7^depth_t · draft probability)
  fixed:  B given;            mass target τ:  B = min { b : Σ_{top b} score / Σ_all score >= τ }
Tokens whose top-k falls outside the kept set are truncated or substituted by the TopK hook (not here).
"""

from __future__ import annotations

from collections.abc import Sequence


def expert_scores(router_probs: Sequence[Sequence[float]], weights: Sequence[float] | None = None) -> list[float]:
    """Σ over verify tokens of (weight · router probability), per expert; router_probs is [tokens][experts]."""
    if not router_probs:
        raise ValueError("need at least one verify token")
    num_experts = len(router_probs[0])
    if weights is not None and len(weights) != len(router_probs):
        raise ValueError(f"{len(weights)} weights for {len(router_probs)} tokens")
    scores = [0.0] * num_experts
    for t, row in enumerate(router_probs):
        if len(row) != num_experts:
            raise ValueError("every token needs a probability for every expert")
        w = 1.0 if weights is None else weights[t]
        for e, g in enumerate(row):
            scores[e] += w * g
    return scores


def depth_weights(depths: Sequence[int], draft_probs: Sequence[float], decay: float = 0.7) -> list[float]:
    """w_t = decay^depth_t · draft probability_t (depth 0 = the token being decoded, weight 1 · its probability)."""
    return [decay**d * p for d, p in zip(depths, draft_probs, strict=True)]


def budget_for_mass(scores: Sequence[float], target: float, minimum: int = 1) -> int:
    """Smallest B >= minimum whose top-B experts keep at least `target` of the total score."""
    if not 0 < target <= 1:
        raise ValueError(f"mass target must be in (0, 1], got {target}")
    if not 1 <= minimum <= len(scores):
        raise ValueError(f"minimum budget must be in [1, {len(scores)}], got {minimum}")
    total = sum(scores)
    if total <= 0:
        return minimum
    kept = 0.0
    for b, s in enumerate(sorted(scores, reverse=True), start=1):
        kept += s
        if b >= minimum and kept >= target * total * (1 - 1e-12):
            return b
    return len(scores)


def kept_experts(scores: Sequence[float], budget: int) -> list[int]:
    """Ids of the top-`budget` experts by score (ties: lower id first), ascending."""
    if not 1 <= budget <= len(scores):
        raise ValueError(f"budget must be in [1, {len(scores)}], got {budget}")
    order = sorted(range(len(scores)), key=lambda e: (-scores[e], e))
    return sorted(order[:budget])


def layer_budgets(
    per_layer_probs: Sequence[Sequence[Sequence[float]]],
    fixed: int | None = None,
    target: float | None = None,
    minimum: int = 1,
) -> tuple[int, ...]:
    """B for every layer: `fixed` everywhere, or the mass-target B of each layer; exactly one of them must be given."""
    if (fixed is None) == (target is None):
        raise ValueError("give exactly one of fixed or target")
    if fixed is not None:
        return tuple(fixed for _ in per_layer_probs)
    return tuple(budget_for_mass(expert_scores(p), target, minimum) for p in per_layer_probs)
