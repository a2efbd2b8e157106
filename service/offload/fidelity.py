"""Routing fidelity of the INT4 self-draft (issue 10 part 1): does the draft pick the target's experts?

Teacher-forced: the same tokens go through the target and through the draft (same model, draft mode), and each layer's
top-k choices are compared token by token, as MoE-SpeQ §2 does (they report 90.9 % of top-4 choices anticipated:
44.1 % same experts in the same order, 46.8 % same set in another order):
  exact    share of tokens whose top-k ids agree in order
  same_set share of tokens whose top-k sets agree
  overlap  mean |draft ∩ target| / k, the share of the target's experts a prefetch from the draft would cover
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from service.offload.offloaded_experts import ExpertsMode


@dataclass(frozen=True)
class LayerFidelity:
    layer: int  # MoE layer index
    exact: float  # share of tokens with the same top-k ids in the same order
    same_set: float  # share of tokens with the same top-k set
    overlap: float  # mean share of the target's top-k the draft also picked


def compare_topk(target: torch.Tensor, draft: torch.Tensor) -> tuple[float, float, float]:
    """`target`, `draft` `[T, k]` expert ids → (exact, same_set, overlap)."""
    if target.shape != draft.shape or target.dim() != 2 or target.shape[0] == 0:
        raise ValueError(
            f"need two non-empty [T, k] id tensors of one shape, got {tuple(target.shape)}, {tuple(draft.shape)}"
        )
    shared = (target[:, :, None] == draft[:, None, :]).any(-1).sum(-1)  # [T]
    k = target.shape[1]
    exact = float((target == draft).all(-1).float().mean())
    return exact, float((shared == k).float().mean()), float(shared.float().mean() / k)


@torch.no_grad()
def routing_fidelity(model: nn.Module, mode: ExpertsMode, input_ids: torch.Tensor) -> list[LayerFidelity]:
    """Per-layer agreement of draft vs target routing on `input_ids [B, S]` (teacher-forced, no cache)."""
    routes: dict[bool, dict[int, torch.Tensor]] = {False: {}, True: {}}

    def listen(layer: int, ids: torch.Tensor, weights: torch.Tensor, draft: bool) -> None:
        routes[draft][layer] = ids.clone()

    mode.listeners.append(listen)
    try:
        model(input_ids=input_ids, use_cache=False)
        with mode.drafting():
            model(input_ids=input_ids, use_cache=False)
    finally:
        mode.listeners.remove(listen)
    return [
        LayerFidelity(layer, *compare_topk(routes[False][layer], routes[True][layer]))
        for layer in sorted(routes[False])
    ]
