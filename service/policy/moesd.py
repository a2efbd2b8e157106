"""MoESD's formulas for speculative verification on a sparse MoE (the cost model's uniform-routing part):

  N(t)              = E · (1 - (1 - k/E)^t)        expected distinct experts hit by t tokens, top-k of E (uniform routing)
  near-full T       = ceil(log_{1-k/E}(1 - τ))      tokens after which N(t) >= τ·E
  target efficiency = T_T(B, 1) / T_T(B, γ+1)      cost of verifying γ+1 tokens per request relative to plain decode
  speedup           = σ(γ+1) / (γ·T_D/T_T(B,1) + T_rej/T_T(B,1) + T_T(B,γ+1)/T_T(B,1))
and the inverse of N (`routing_events`), which cost_model.StepTimeModel uses to learn expert reuse from measured unique
experts.
"""

from __future__ import annotations

import math


def expected_experts(tokens: float, num_experts: int, top_k: float) -> float:
    """N(t): expected distinct experts activated per layer by `tokens` tokens."""
    if num_experts <= 0 or not 0 < top_k <= num_experts:
        raise ValueError(f"need 0 < top_k <= num_experts, got top_k={top_k}, num_experts={num_experts}")
    if tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def saturation_tokens(num_experts: int, top_k: int, tau: float = 0.95) -> int:
    """Tokens after which at least a fraction tau of the experts is expected to be active."""
    if not 0 < tau < 1:
        raise ValueError(f"tau must be in (0, 1), got {tau}")
    rho = top_k / num_experts
    if rho >= 1:
        return 1
    return math.ceil(math.log(1 - tau) / math.log(1 - rho))


def target_efficiency(t_target_1: float, t_target_gamma: float) -> float:
    """T_T(B,1) / T_T(B,γ+1): 1 means verifying γ+1 tokens per request is free, lower means it costs."""
    if t_target_1 <= 0 or t_target_gamma <= 0:
        raise ValueError("target times must be positive")
    return t_target_1 / t_target_gamma


def speedup(
    sigma: float, gamma: int, t_draft: float, t_reject: float, t_target_1: float, t_target_gamma: float
) -> float:
    """MoESD's speedup of speculation over plain decode; sigma = accepted fraction of the γ+1 verified positions."""
    if t_target_1 <= 0:
        raise ValueError("t_target_1 must be positive")
    cost = (gamma * t_draft + t_reject + t_target_gamma) / t_target_1
    return sigma * (gamma + 1) / cost


def routing_events(unique: float, num_experts: int, top_k: int) -> float:
    """Inverse of N: how many independent top-k draws would hit `unique` distinct experts on average."""
    frac = min(max(unique, 0.0) / num_experts, 1.0 - 1e-9)
    return math.log(1.0 - frac) / math.log(1.0 - top_k / num_experts) if top_k < num_experts else 1.0
