"""A drop-in for transformers' fused Mixtral experts whose weights come from the expert store (or INT4 in draft mode).

transformers 5.19 keeps each layer's experts as `mlp.experts.gate_up_proj [E, 2I, H]` and `down_proj [E, H, I]` and calls
`experts(hidden [T, H], top_k_index [T, k], top_k_weights [T, k])` after its router. `install` swaps that module for
`OffloadedExperts`, so attention, norms, embeddings and the router gates stay the target's own tensors and one KV cache
serves both modes: the draft is the same model with `mode.draft = True` (MoE-SpeQ §3.4, shared non-expert weights and KV).

Target mode computes resident experts first (hit-first, their transfers cannot stall), but adds the contributions in
ascending expert order with the same per-expert ops as transformers' eager loop, so the output is bit-identical to the
model without offloading whatever the residency.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import torch
from torch import nn

from service.offload.self_draft import Int4Experts
from service.offload.types import ExpertKey

RouteListener = Callable[[int, torch.Tensor, torch.Tensor, bool], None]  # (layer, ids [T,k], weights [T,k], draft)


class ExpertSource(Protocol):
    def use(self, key: ExpertKey) -> AbstractContextManager[tuple[torch.Tensor, torch.Tensor]]: ...

    def is_ready(self, key: ExpertKey) -> bool: ...


class ExpertsMode:
    """Shared by every layer's OffloadedExperts: which weights to run and who hears about routing."""

    def __init__(self) -> None:
        self.draft = False  # True: INT4 experts (the self-draft); False: target experts through the source
        self.listeners: list[RouteListener] = []  # told every layer's routing, both modes
        self.on_target_layer: Callable[[int], None] | None = None  # told when a target forward enters a layer

    @contextmanager
    def drafting(self) -> Iterator[None]:
        self.draft = True
        try:
            yield
        finally:
            self.draft = False


class AllResident:
    """Expert source with every expert in memory: the no-offload reference."""

    def __init__(self, experts: list[tuple[torch.Tensor, torch.Tensor]]):
        self._experts = experts

    @contextmanager
    def use(self, key: ExpertKey) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        layer, expert = key
        yield self._experts[layer][0][expert], self._experts[layer][1][expert]

    def is_ready(self, key: ExpertKey) -> bool:
        return True


class OffloadedExperts(nn.Module):
    def __init__(
        self,
        layer: int,
        num_experts: int,
        act_fn: nn.Module,
        source: ExpertSource,
        draft: Int4Experts | None,
        mode: ExpertsMode,
    ):
        super().__init__()
        self.layer = layer
        self.num_experts = num_experts
        self.act_fn = act_fn
        self.source = source
        self.draft_experts = draft
        self.mode = mode

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        draft = self.mode.draft
        for listener in self.mode.listeners:
            listener(self.layer, top_k_index, top_k_weights, draft)
        if not draft and self.mode.on_target_layer is not None:
            self.mode.on_target_layer(self.layer)
        experts = sorted(int(e) for e in torch.unique(top_k_index))
        parts: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # expert -> (token_idx [n], weighted out [n, H])
        if draft:
            if self.draft_experts is None:
                raise RuntimeError("draft mode needs INT4 experts: install(..., draft=True)")
            for e in experts:
                slot, token_idx = torch.where(e == top_k_index.T)
                out = self.draft_experts.forward(e, hidden_states[token_idx])
                parts[e] = (token_idx, out * top_k_weights[token_idx, slot, None])
        else:
            for e in sorted(experts, key=lambda e: not self.source.is_ready((self.layer, e))):
                slot, token_idx = torch.where(e == top_k_index.T)
                with self.source.use((self.layer, e)) as (gate_up, down):
                    gate, up = nn.functional.linear(hidden_states[token_idx], gate_up).chunk(2, dim=-1)
                    out = nn.functional.linear(self.act_fn(gate) * up, down)
                parts[e] = (token_idx, out * top_k_weights[token_idx, slot, None])
        final = torch.zeros_like(hidden_states)
        for e in experts:
            token_idx, out = parts[e]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final


def fused_experts(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per MoE layer `(gate_up [E, 2I, H], down [E, H, I])` of a transformers Mixtral model."""
    layers = []
    for index, layer in enumerate(model.model.layers):
        experts = layer.mlp.experts
        if not hasattr(experts, "gate_up_proj") or not hasattr(experts, "down_proj"):
            raise TypeError(
                f"layer {index}: expected transformers' fused Mixtral experts, got {type(experts).__name__}"
            )
        layers.append((experts.gate_up_proj.data, experts.down_proj.data))
    return layers


def install(
    model: nn.Module,
    source: ExpertSource | None,
    mode: ExpertsMode,
    *,
    draft: bool = True,
    group_size: int = 128,
) -> list[OffloadedExperts]:
    """Replace every layer's experts by OffloadedExperts reading `source` (None: keep the weights in memory).

    With a source the original expert tensors are dropped from the model: the slow tier is then the only copy.
    """
    experts = fused_experts(model)
    source = source if source is not None else AllResident([(g.clone(), d.clone()) for g, d in experts])
    installed = []
    for index, (layer, (gate_up, down)) in enumerate(zip(model.model.layers, experts, strict=True)):
        int4 = Int4Experts.quantize(gate_up, down, group_size) if draft else None
        module = OffloadedExperts(index, gate_up.shape[0], layer.mlp.experts.act_fn, source, int4, mode)
        layer.mlp.experts = module
        installed.append(module)
    return installed
