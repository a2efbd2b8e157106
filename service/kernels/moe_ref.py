"""Plain-torch MoE reference: Mixtral routing, the MoE-Spec expert budget, and the fused expert forward.

This file is both the CPU path and the oracle every other kernel is tested against (STYLE §5), so it favours
obvious code over speed: one loop over experts, each expert's tokens gathered with an index.

Weight layout follows transformers' in-memory Mixtral experts (notes/tiny-model.md): `w13 [E, 2I, H]` is gate rows then up
rows, `w2 [E, H, I]` is the down projection; expert e computes `w2[e] @ (silu(w13[e][:I] @ x) * (w13[e][I:] @ x))`.

Budget (papers/README.md, MoE-Spec): per layer, score each expert by router probability summed over the verify tokens, keep the
top B (`select_budget_experts`). Tokens whose top-k leaves the budget either
- **substitute** (`apply_budget_substitution`): out-of-budget scores become -inf before top-k, so every token takes its best k
  experts inside the budget; or
- **truncate** (`apply_budget_truncation`): out-of-budget slots get weight 0, the rest of the token's mixture is kept.
  Weights are renormalised only when the model's router renormalises (Mixtral does, `norm_topk_prob`); the caller says which.
`moe_forward(..., expert_mask=mask)` is truncation without renormalisation: masked experts are never computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def route_topk(router_logits: torch.Tensor, k: int, *, renormalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixtral routing: softmax over all experts, top-k, then (if `renormalize`) weights rescaled to sum to 1 per token.

    Returns `(topk_ids [T, k] int64, topk_weights [T, k] float32)`.
    """
    _check_logits(router_logits, k)
    probs = torch.softmax(router_logits.float(), dim=-1)  # [T, E]
    return _topk_from_scores(probs, probs, k, renormalize)


def select_budget_experts(
    router_probs: torch.Tensor, budget: int, *, token_weights: torch.Tensor | None = None
) -> torch.Tensor:
    """MoE-Spec budget: `mask[e] = e ∈ top_B(Σ_t w_t · p[t, e])`, with `w_t = 1` unless `token_weights` is given.

    `router_probs [T, E]` are post-softmax router probabilities of the verify tokens; `token_weights [T]` lets a caller weight
    tokens (the MoE-Spec fork uses 0.7^depth × draft probability). Ties go to the lower expert id. Returns a bool mask `[E]`.
    """
    if router_probs.dim() != 2:
        raise ValueError(f"router_probs must be [T, E], got shape {tuple(router_probs.shape)}")
    num_experts = router_probs.shape[1]
    if not 1 <= budget <= num_experts:
        raise ValueError(f"budget must be in [1, {num_experts}], got {budget}")
    probs = router_probs.float()
    if token_weights is not None:
        if token_weights.shape != (router_probs.shape[0],):
            raise ValueError(f"token_weights must be [T]={router_probs.shape[0]}, got {tuple(token_weights.shape)}")
        probs = probs * token_weights.float()[:, None]
    score = probs.sum(dim=0)  # [E]
    # A stable sort makes ties deterministic (lower id first); torch.topk gives no such promise.
    order = torch.sort(score, descending=True, stable=True).indices
    mask = torch.zeros(num_experts, dtype=torch.bool, device=router_probs.device)
    mask[order[:budget]] = True
    return mask


def apply_budget_substitution(
    router_logits: torch.Tensor, mask: torch.Tensor, k: int, *, renormalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Substitution: top-k over `p[t, e]` with out-of-budget experts at -inf, so each token picks its best in-budget experts.

    Probabilities come from the softmax over *all* experts (the router is unchanged); only the choice is restricted. With
    `renormalize` (Mixtral) this equals a softmax over the in-budget logits. Needs `k <= mask.sum()`.
    Returns `(topk_ids [T, k], topk_weights [T, k])`.
    """
    _check_logits(router_logits, k)
    _check_mask(mask, router_logits.shape[1])
    in_budget = int(mask.sum())
    if k > in_budget:
        raise ValueError(f"substitution needs k <= budget: k={k}, {in_budget} experts in budget")
    probs = torch.softmax(router_logits.float(), dim=-1)  # [T, E]
    scores = probs.masked_fill(~mask.to(probs.device)[None, :], float("-inf"))
    return _topk_from_scores(scores, probs, k, renormalize)


def apply_budget_truncation(
    topk_ids: torch.Tensor, topk_weights: torch.Tensor, mask: torch.Tensor, *, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncation: a token's slots on out-of-budget experts get weight 0; the ids are kept so shapes stay `[T, k]`.

    `renormalize` must match the model's router: when true the surviving weights are rescaled to sum to 1 per token (a token
    with no surviving expert keeps all-zero weights, its MoE output is 0 and the residual carries it). Returns new tensors.
    """
    _check_topk(topk_ids, topk_weights)
    _check_mask(mask, None)
    keep = mask.to(topk_ids.device)[topk_ids]  # [T, k]
    weights = torch.where(keep, topk_weights, torch.zeros_like(topk_weights))
    if renormalize:
        total = weights.sum(dim=-1, keepdim=True)
        weights = torch.where(total > 0, weights / total.clamp_min(torch.finfo(weights.dtype).tiny), weights)
    return topk_ids.clone(), weights


def moe_forward(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    expert_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """`out[t] = Σ_j w[t, j] · expert_{ids[t, j]}(x[t])` over slots whose expert is in `expert_mask` (all when None).

    x [T, H], w13 [E, 2I, H], w2 [E, H, I], topk_ids/topk_weights [T, k]; returns [T, H] in x's dtype, accumulated in fp32.
    Masked experts' weights are never read, so they may hold anything (tests fill them with NaN).
    """
    check_moe_shapes(x, w13, w2, topk_ids, topk_weights, expert_mask)
    num_experts, two_inter, _ = w13.shape
    inter = two_inter // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)  # [T, H]
    for expert in range(num_experts):
        if expert_mask is not None and not bool(expert_mask[expert]):
            continue
        token_idx, slot_idx = torch.nonzero(topk_ids == expert, as_tuple=True)  # [n], [n]
        if token_idx.numel() == 0:
            continue
        xe = x[token_idx].float()  # [n, H]
        gate_up = xe @ w13[expert].float().T  # [n, 2I]
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]  # [n, I]
        ye = act @ w2[expert].float().T  # [n, H]
        out.index_add_(0, token_idx, ye * topk_weights[token_idx, slot_idx].float()[:, None])
    return out.to(x.dtype)


def check_moe_shapes(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    expert_mask: torch.Tensor | None,
    *,
    check_values: bool = True,
) -> None:
    """Raise ValueError naming the first inconsistent shape; shared by every MoE backend so they reject the same inputs.

    `check_values=False` skips the expert-id range check, the one check that reads tensor values (a device sync)."""
    if x.dim() != 2:
        raise ValueError(f"x must be [T, H], got shape {tuple(x.shape)}")
    if w13.dim() != 3 or w13.shape[2] != x.shape[1] or w13.shape[1] % 2:
        raise ValueError(f"w13 must be [E, 2I, H={x.shape[1]}], got shape {tuple(w13.shape)}")
    num_experts, two_inter, hidden = w13.shape
    if tuple(w2.shape) != (num_experts, hidden, two_inter // 2):
        raise ValueError(f"w2 must be [E, H, I]={(num_experts, hidden, two_inter // 2)}, got {tuple(w2.shape)}")
    _check_topk(topk_ids, topk_weights)
    if topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk_ids has {topk_ids.shape[0]} tokens, x has {x.shape[0]}")
    if check_values and topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= num_experts):
        raise ValueError(f"topk_ids must lie in [0, {num_experts})")
    if expert_mask is not None:
        _check_mask(expert_mask, num_experts)


def _topk_from_scores(
    scores: torch.Tensor, probs: torch.Tensor, k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.topk(scores, k, dim=-1).indices  # [T, k]
    weights = probs.gather(-1, ids)  # [T, k]
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return ids, weights


def _check_logits(router_logits: torch.Tensor, k: int) -> None:
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be [T, E], got shape {tuple(router_logits.shape)}")
    if not 1 <= k <= router_logits.shape[1]:
        raise ValueError(f"k must be in [1, {router_logits.shape[1]}], got {k}")


def _check_topk(topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> None:
    if topk_ids.dim() != 2 or topk_ids.shape != topk_weights.shape:
        raise ValueError(
            f"topk_ids and topk_weights must both be [T, k], got {tuple(topk_ids.shape)} and {tuple(topk_weights.shape)}"
        )
    if topk_ids.dtype.is_floating_point:
        raise ValueError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")


def _check_mask(mask: torch.Tensor, num_experts: int | None) -> None:
    if mask.dtype != torch.bool or mask.dim() != 1:
        raise ValueError(f"expert mask must be a 1-D bool tensor, got {mask.dtype} of shape {tuple(mask.shape)}")
    if num_experts is not None and mask.shape[0] != num_experts:
        raise ValueError(f"expert mask has {mask.shape[0]} entries, the layer has {num_experts} experts")
