"""MoE-Spec's expert budget in the verify forward only, and the count of experts each verify forward touches.

Wraps SGLang's `TopK` routing (topk_hook below). Outside a verify forward it passes the routing through, so
prefill, plain decode and the draft model are never affected. Inside one, per MoE layer:
- it records which experts the routing picked (`wanted`) and which the MoE then computes (`touched`); without a
  budget the two are the same and the layer only keeps its `topk_ids` (no tensor op per layer: a plain decode step
  pays nothing for being counted), with one they are [E + 1] bool masks on the routing's device. Either way counting
  costs no host sync per layer (one scatter and one `.tolist()` at the end of the step);
- with a budget B (from the policies, see policies.StepPlan) it keeps the B experts with the largest router
  probability summed over the verify tokens that can still be accepted (a request's drafts deeper than its K_i
  never can, so they do not vote) (`service.kernels.moe_ref.select_budget_experts`) and either
  *truncates* (dropped slots get weight 0) or *substitutes* (each token takes its best in-budget experts).

A truncated slot must not be computed. SGLang's GPU MoE skips id -1; its CPU MoE (`moe_forward_native`) cannot take
-1, so on CPU a dropped slot is pointed at another in-budget expert of the token with weight 0: same output, and only
in-budget experts run (see redirect_dropped). B is raised to at least top_k. Substitution needs plain softmax routing (no grouped top-k, no correction bias); otherwise
the layer falls back to truncation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch

from moe_sglang.settings import BUDGET_MODES
from service.kernels.moe_ref import apply_budget_substitution, apply_budget_truncation, select_budget_experts


@dataclass
class VerifyExperts:
    """Routing seen during one verify forward, per MoE layer id."""

    budget: tuple[int, ...] | None = None  # [num_layers] experts kept per layer; None = no budget
    mode: str = BUDGET_MODES[0]  # one of BUDGET_MODES
    token_weights: torch.Tensor | None = None  # [T] 1 for verify tokens that can be accepted (depth <= K_i), else 0
    wanted: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [E + 1] bool, picked by the router
    touched: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [E + 1] bool, computed by the MoE
    # layers without a budget: layer -> the routing's topk_ids (picked == computed), turned into masks by counts()
    routed: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    num_experts: int = 0  # E, known once a layer has routed

    def counts(self) -> tuple[tuple[int, ...], int]:
        """(unique experts touched per layer in layer order, experts dropped by the budget over all layers)."""
        if not self.touched and self.routed:
            if all(_one_token(ids) for ids in self.routed.values()):
                # one token per layer (a batch-1 plain decode): top-k picks k distinct experts, nothing to count
                return tuple(self.routed[i][0].shape[1] for i in sorted(self.routed)), 0
            stacked = self._stacked()
            if stacked is not None:  # every layer saw the same tokens: its masks as one [L, E + 1] tensor
                return tuple(_masks(stacked.flatten(1), self.num_experts)[:, 1:].sum(dim=1).tolist()), 0
        masks = self._routed_masks()
        touched = {**masks, **self.touched}
        if not touched:
            return (), 0
        layers = sorted(touched)
        unique = torch.stack([touched[i] for i in layers])[:, 1:].sum(dim=1).tolist()  # [L]
        dropped = 0
        if self.touched:  # only budgeted layers can drop experts
            budgeted = sorted(self.touched)
            wanted = torch.stack([self.wanted[i] for i in budgeted])[:, 1:]
            dropped = int((wanted & ~torch.stack([self.touched[i] for i in budgeted])[:, 1:]).sum())
        return tuple(int(u) for u in unique), dropped

    def token_experts(self) -> list[list[list[int]]] | None:
        """[L][T][k] the experts each token routed to, unbudgeted layers in layer order (in a plain decode token t is
        request t's), as host lists (one concatenation and one copy for the whole step); None where nothing was
        routed, a budget changed the routing, or layers saw different shapes."""
        if not self.routed or self.touched:
            return None
        stacked = self._stacked()
        if stacked is not None:
            return stacked.tolist()
        layers = [self.routed[i] for i in sorted(self.routed)]
        shapes = {(sum(t.shape[0] for t in ids), ids[0].shape[1]) for ids in layers}
        if len(shapes) > 1:
            return None
        ids = [t for layer in layers for t in layer]
        flat = torch.cat(ids) if len(ids) > 1 else ids[0]
        return flat.reshape(len(layers), *shapes.pop()).tolist()

    def _stacked(self) -> torch.Tensor | None:
        """[L, T, k] the routing of every unbudgeted layer in layer order, in one op, where each layer routed once and
        all alike (a decode or verify forward); None otherwise."""
        routed = [self.routed[i] for i in sorted(self.routed)]
        if any(len(ids) != 1 for ids in routed) or len({ids[0].shape for ids in routed}) != 1:
            return None
        return torch.stack([ids[0] for ids in routed])

    def _routed_masks(self) -> dict[int, torch.Tensor]:
        """[E + 1] bool per unbudgeted layer, all layers in one scatter (slot 0 absorbs id -1, as _experts_mask)."""
        if not self.routed:
            return {}
        layers = sorted(self.routed)
        ids = [torch.cat(self.routed[i]).reshape(-1) for i in layers]
        if len({t.numel() for t in ids}) > 1:  # layers saw different token counts: one mask each
            return {i: _experts_mask(t, self.num_experts, None) for i, t in zip(layers, ids, strict=True)}
        return dict(zip(layers, _masks(torch.stack(ids), self.num_experts), strict=True))


# The target forward of the decode step in flight in this thread (a verify, or a plain decode), set by the
# speculative step around it and read by the routing hook (topk_hook): routing has no extension point, and the MoE
# layer cannot see the step.
_VERIFY: ContextVar[VerifyExperts | None] = ContextVar("moe_serve_verify_experts", default=None)


@contextmanager
def routing_scope(
    budget: tuple[int, ...] | None, mode: str, token_weights: torch.Tensor | None = None
) -> Iterator[VerifyExperts]:
    """Routing inside the block is the step's target forward's: counted, and budgeted when `budget` is set (verify
    forwards only: a plain decode gets no budget)."""
    scope = VerifyExperts(budget=budget, mode=mode, token_weights=token_weights)
    token = _VERIFY.set(scope)
    try:
        yield scope
    finally:
        _VERIFY.reset(token)


# SGLang's TopK routing methods the hook wraps (forward_native is the CPU path without AMX,
# sglang/kernels/fused_op.py: _platform_key). Why a hook: SGLang has no extension point between the router and the
# MoE kernel, and the budget must change which experts the MoE computes.
TOPK_TARGETS = tuple(f"sglang.srt.layers.moe.topk.TopK.forward_{p}" for p in ("native", "cpu", "cuda"))


def topk_hook(original, topk, hidden_states, router_logits, *args, **kwargs):
    """AROUND hook of TopK.forward_*: outside a decode step's target forward (prefill, the draft model) routing
    passes through untouched."""
    return scoped(topk, original(topk, hidden_states, router_logits, *args, **kwargs), router_logits)


def scoped(topk, out, router_logits: torch.Tensor):
    """The TopK module `topk`'s output `out` as the MoE should compute it: inside a verify scope counted (and
    budgeted where the scope has a budget), elsewhere unchanged (also called by inline_moe.py, which routes without
    the module)."""
    scope = _VERIFY.get()
    if scope is None or topk.is_draft or not hasattr(out, "topk_ids") or not hasattr(out, "_replace"):
        return out
    config = topk.topk_config
    plain = not config.use_grouped_topk and config.correction_bias is None and config.scoring_func == "softmax"
    weights, ids = route_in_verify(
        scope,
        topk.layer_id,
        out.topk_weights,
        out.topk_ids,
        router_logits,
        renormalize=config.renormalize,
        plain_softmax=plain and config.custom_routing_function is None,
    )
    if weights is out.topk_weights and ids is out.topk_ids:
        return out  # nothing dropped (the common case): no new tuple
    return out._replace(topk_weights=weights, topk_ids=ids)


def budgeted(layer_id: int, num_experts: int, top_k: int) -> bool:
    """Whether the routing scope open here (if any) budgets this layer: its routing must then go through `scoped`
    before the experts run; otherwise routing computed elsewhere (the decode MoE op, target_forward.py) is what the
    MoE computes and only needs `record_routed`."""
    scope = _VERIFY.get()
    return scope is not None and _layer_budget(scope.budget, layer_id, num_experts, top_k) is not None


def record_routed(layer_id: int, topk_ids: torch.Tensor, num_experts: int) -> None:
    """Count routing the MoE computes unchanged in the scope open here (nothing without one), as `scoped` does."""
    scope = _VERIFY.get()
    if scope is not None:
        _record(scope, layer_id, topk_ids, num_experts)


def _record(scope: VerifyExperts, layer_id: int, topk_ids: torch.Tensor, num_experts: int) -> None:
    # nothing dropped: what the router picked is what the MoE computes (SGLang's CPU and GPU MoE read topk_ids
    # without writing it, so the reference holds the routing until counts())
    scope.num_experts = num_experts
    scope.routed.setdefault(layer_id, []).append(topk_ids)


def route_in_verify(
    scope: VerifyExperts,
    layer_id: int,
    topk_weights: torch.Tensor,  # [T, k] router weights of the chosen experts
    topk_ids: torch.Tensor,  # [T, k] chosen experts
    router_logits: torch.Tensor,  # [T, E]
    *,
    renormalize: bool,  # the model's router rescales the kept weights to sum to 1
    plain_softmax: bool,  # routing is softmax top-k without groups or bias (substitution is exact then)
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (weights, ids) the MoE should compute for this verify layer, recording what was wanted and touched."""
    num_experts = router_logits.shape[-1]
    scope.num_experts = num_experts
    budget = _layer_budget(scope.budget, layer_id, num_experts, topk_ids.shape[1])
    if budget is None or topk_ids.shape[0] == 0:
        _record(scope, layer_id, topk_ids, num_experts)
        return topk_weights, topk_ids
    scope.wanted[layer_id] = _experts_mask(topk_ids, num_experts, scope.wanted.get(layer_id))
    probs = torch.softmax(router_logits.float(), dim=-1)  # [T, E]
    weights = scope.token_weights
    if weights is not None and weights.shape[0] != probs.shape[0]:
        weights = None  # padded batch: rank over every token
    mask = select_budget_experts(probs, budget, token_weights=weights)  # [E]
    k = topk_ids.shape[1]
    if scope.mode == "substitution" and plain_softmax and k <= budget:
        ids, weights = apply_budget_substitution(router_logits, mask, k, renormalize=renormalize)
    else:
        ids, weights = apply_budget_truncation(topk_ids.long(), topk_weights.float(), mask, renormalize=renormalize)
        ids = redirect_dropped(ids, mask, probs)
    topk_ids, topk_weights = ids.to(topk_ids.dtype), weights.to(topk_weights.dtype)
    scope.touched[layer_id] = _experts_mask(topk_ids, num_experts, scope.touched.get(layer_id))
    return topk_weights, topk_ids


def _layer_budget(budget: tuple[int, ...] | None, layer_id: int, num_experts: int, top_k: int) -> int | None:
    """B for this layer, at least top_k (MoE-Spec's range; each token then keeps k distinct experts); None = all."""
    if budget is None:
        return None
    b = budget[layer_id] if layer_id < len(budget) else budget[-1]
    return None if b >= num_experts else max(b, top_k)


def redirect_dropped(ids: torch.Tensor, mask: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Point every out-of-budget slot (weight already 0) at an in-budget expert not yet in the token's row.

    Distinct ids per token matter: SGLang's CPU MoE counts tokens per expert with a scatter of ones, so a repeated
    expert in one row would be under-counted. Candidates are the token's k most probable in-budget experts; with
    B >= k there is always a free one among them. The j-th out-of-budget slot of a row (in slot order) takes the j-th
    candidate (in probability order) that no in-budget slot of the row holds: what filling the slots one by one, each
    with the first candidate not yet in the row, gives, in a fixed number of whole-tensor ops (the slot-by-slot loop
    was k * k rounds of small ops per layer: a batch-1 verify of moe-fine on the CPU engine took 7.8-10.1 ms with a
    budget against 6.2 without one, bench.budget's truncation rows, sixty-fifth session).
    """
    k = ids.shape[1]
    candidates = probs.masked_fill(~mask[None, :], float("-inf")).topk(k, dim=-1).indices  # [T, k]
    kept = mask[ids]  # [T, k] in-budget slots
    held = ((candidates[:, :, None] == ids[:, None, :]) & kept[:, None, :]).any(dim=-1)  # [T, k] candidate in the row
    free = candidates.gather(1, torch.sort(held.to(torch.int8), dim=-1, stable=True).indices)  # free ones first
    rank = (~kept).cumsum(dim=-1) - 1  # [T, k] each out-of-budget slot's place among the row's
    enough = rank < (~held).sum(dim=-1, keepdim=True)  # always with B >= k; else the slot keeps its id
    return torch.where(~kept & enough, free.gather(1, rank.clamp(min=0)), ids)


def _masks(ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """[L, E + 1] bool: the experts in each row of `ids` [L, n] (slot 0 absorbs id -1, as _experts_mask)."""
    masks = torch.zeros(ids.shape[0], num_experts + 1, dtype=torch.bool, device=ids.device)
    return masks.scatter_(1, ids.long() + 1, True)


def _one_token(routed: list[torch.Tensor]) -> bool:
    return len(routed) == 1 and routed[0].dim() == 2 and routed[0].shape[0] == 1


def _experts_mask(ids: torch.Tensor, num_experts: int, into: torch.Tensor | None) -> torch.Tensor:
    """[E + 1] bool: slot 0 absorbs id -1 (padding or a dropped slot), so no data-dependent indexing (no host sync)."""
    mask = torch.zeros(num_experts + 1, dtype=torch.bool, device=ids.device) if into is None else into
    return mask.index_fill_(0, ids.reshape(-1).long() + 1, True)
