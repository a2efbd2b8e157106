"""In-process routing control for transformers' Mixtral (benches only): count the unique experts a forward touches,
force a chosen number of unique experts, or apply MoE-Spec's expert budget with the torch reference functions.

transformers' `MixtralExperts` loops over the experts some token picked and skips id == num_experts, so a truncated
slot pointed there is never computed: the forward's time then follows the experts actually touched, like SGLang's CPU
MoE (`moe_forward_native`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from service.kernels.moe_ref import (
    apply_budget_substitution,
    apply_budget_truncation,
    route_topk,
    select_budget_experts,
)


@dataclass
class RoutingProbe:
    """What the patched routers do on the next forwards, and what they saw on the last one."""

    force_unique: int | None = None  # route the forward's tokens over exactly this many experts (timing only)
    budget: int | None = None  # experts kept per layer (MoE-Spec); None = no budget
    mode: str = "truncation"  # truncation | substitution
    unique: list[int] = field(default_factory=list)  # [num_layers] unique experts touched by the last forward
    dropped: int = 0  # token-expert slots the budget removed in the last forward (truncation)

    def reset(self) -> None:
        self.unique, self.dropped = [], 0


@contextlib.contextmanager
def probed_routers(model: torch.nn.Module) -> Iterator[RoutingProbe]:
    """Patch every Mixtral router of `model` for the duration of the block."""
    probe = RoutingProbe()
    routers = [m for m in model.modules() if type(m).__name__ == "MixtralTopKRouter"]
    if not routers:
        raise ValueError(f"{type(model).__name__} has no Mixtral routers")
    originals = [r.forward for r in routers]
    for router in routers:
        router.forward = _routed(router, probe)
    try:
        yield probe
    finally:
        for router, forward in zip(routers, originals, strict=True):
            router.forward = forward


def _routed(router, probe: RoutingProbe):
    def forward(hidden_states: torch.Tensor):
        hidden_states = hidden_states.reshape(-1, router.hidden_dim)
        logits = torch.nn.functional.linear(hidden_states, router.weight)  # [T, E]
        num_experts, k = router.num_experts, router.top_k
        if probe.force_unique is not None:
            ids, weights = forced_routing(logits.shape[0], k, probe.force_unique, logits.device)
        else:
            ids, weights = route_topk(logits, k, renormalize=True)
            if probe.budget is not None:
                ids, weights = _budgeted(logits, ids, weights, probe)
        touched = ids[ids < num_experts].unique()
        probe.unique.append(int(touched.numel()))
        return logits, weights.to(hidden_states.dtype), ids

    return forward


def forced_routing(tokens: int, k: int, unique: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token j takes experts (j·k + i) mod u, i < k: the tokens together touch min(tokens·k, u) experts."""
    if unique < k:
        raise ValueError(f"cannot route top-{k} over {unique} experts")
    ids = (torch.arange(tokens, device=device)[:, None] * k + torch.arange(k, device=device)[None, :]) % unique
    return ids, torch.full((tokens, k), 1.0 / k, device=device)


def _budgeted(logits, ids, weights, probe: RoutingProbe) -> tuple[torch.Tensor, torch.Tensor]:
    num_experts, k = logits.shape[1], ids.shape[1]
    budget = min(max(probe.budget, k), num_experts)  # as the engine does: B is raised to at least top_k
    mask = select_budget_experts(torch.softmax(logits.float(), dim=-1), budget)  # [E]
    if probe.mode == "substitution":
        return apply_budget_substitution(logits, mask, k, renormalize=True)
    if probe.mode != "truncation":
        raise ValueError(f"budget mode {probe.mode!r}: expected truncation or substitution")
    ids, weights = apply_budget_truncation(ids, weights, mask, renormalize=True)
    keep = mask[ids]  # [T, k]
    probe.dropped += int((~keep).sum())
    return torch.where(keep, ids, torch.full_like(ids, num_experts)), weights  # id E: skipped by MixtralExperts
