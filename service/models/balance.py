"""Per-layer router load-balance loss (Switch Transformer form, applied to each MoE layer separately).

transformers' `load_balancing_loss_func` concatenates every layer's router logits before computing the penalty, so
one layer sending 3x the mean load to an expert can be cancelled by another layer under-using it (measured in
/work/shared/notes/tiny-model.md). Penalising each layer and averaging keeps every layer balanced.

    loss_l = E * sum_e f_{l,e} * P_{l,e}
      f_{l,e} = share of the layer's top-k assignments that go to expert e
      P_{l,e} = mean router probability of expert e
    loss    = mean_l loss_l          (= 1.0 when routing is perfectly uniform)
"""

from __future__ import annotations

import torch


def per_layer_balance_loss(router_logits: tuple[torch.Tensor, ...], top_k: int) -> torch.Tensor:
    """router_logits: one [T, E] tensor per MoE layer. Returns a scalar, 1.0 at perfect balance."""
    if not router_logits:
        raise ValueError("no router logits: was the model run with output_router_logits=True?")
    losses = []
    for logits in router_logits:  # [T, E]
        num_experts = logits.shape[-1]
        probs = torch.softmax(logits.float(), dim=-1)  # [T, E]
        chosen = torch.topk(probs, top_k, dim=-1).indices  # [T, k]
        counts = torch.zeros(num_experts, device=logits.device).scatter_add_(
            0, chosen.reshape(-1), torch.ones(chosen.numel(), device=logits.device)
        )  # [E]
        share = counts / chosen.numel()  # [E], sums to 1
        losses.append(num_experts * (share * probs.mean(dim=0)).sum())
    return torch.stack(losses).mean()
