"""The shape of a sparse MoE and the coefficients of the linear step-time model (cost_model.StepTimeModel fits them
from measured steps; the policies' priors are instances)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeShape:
    num_experts: int  # routed experts per MoE layer (E)
    top_k: int  # experts per token (k)
    num_layers: int  # MoE layers

    def __post_init__(self) -> None:
        if self.num_experts < 1 or not 1 <= self.top_k <= self.num_experts or self.num_layers < 1:
            raise ValueError(f"bad MoE shape {self}")


@dataclass(frozen=True)
class StepCoefficients:
    """Linear step-time model: verify = fixed + per_token·tokens + per_expert·Σ_layers unique experts,
    draft = per_draft_step·(max K) + per_draft_token·ΣK + per_backlog_token·(catch-up tokens), other = constant;
    a judgement (a draft forward over a context, no draft built) = per_judgement + per_judged_token·(its catch-up)."""

    verify_fixed: float  # seconds per verify forward
    per_token: float  # seconds per verified token (dense part + expert compute)
    per_expert: float  # seconds per distinct expert loaded, summed over layers
    per_draft_step: float  # seconds per sequential draft step
    per_draft_token: float  # seconds per drafted token
    other: float  # seconds per step outside draft and target forward, for a step that verified drafts
    verify_extra: float = 0.0  # seconds per request a verify forward costs beyond a plain decode of the same tokens
    plain_other: float | None = None  # seconds per plain-decode step outside the target forward; None = `other`
    per_backlog_token: float = 0.0  # seconds per token a draft model runs to catch up with a request's context
    per_judgement: float | None = None  # seconds per judging forward; None = a draft step's (per_draft_step)
    per_judged_token: float | None = None  # seconds per token it catches up; None = per_backlog_token
