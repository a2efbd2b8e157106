"""In-process routing control for transformers' Mixtral (benches only): count the unique experts a forward touches,
force a chosen number of unique experts, or apply MoE-Spec's expert budget with the torch reference functions.

transformers' `MixtralExperts` in its eager form loops over the experts some token picked and skips id ==
num_experts, so a truncated slot pointed there is never computed: the forward's time then follows the experts
actually touched, like SGLang's CPU MoE (`moe_forward_native`). `probed_routers` runs the experts in that form for
its duration: transformers 5 defaults to `grouped_mm`, whose output rows for an id it has no expert for are left
uninitialized (torch.empty) and then multiplied by the slot's weight 0, which gives 0 unless the memory held a NaN or
an infinity (tests/bench/test_routing.py's NaN, 4 of 40 forwards with a budget in a loop). `engine_experts` puts the CPU engine's own expert products in its place (the tuned
`GemmPlan` of service/kernels/small_gemm.py, as moe_sglang/cpu_moe.py runs them), so a forward's expert time is the
engine's: transformers' `F.linear` per expert reads a weight at up to half the speed for 2-8 rows (small_gemm's
table), which makes a verify's time grow with its tokens, not only with the experts they touch.
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
from service.kernels.small_gemm import FORMS, GemmPlan, moe_experts


@dataclass
class RoutingProbe:
    """What the patched routers do on the next forwards, and what they saw on the last one."""

    force_unique: int | None = None  # route the forward's tokens over exactly this many experts (timing only)
    budget: int | None = None  # experts kept per layer (MoE-Spec); None = no budget
    mode: str = "truncation"  # truncation | substitution
    # truncation: point a dropped slot at an in-budget expert not in the token's row, with weight 0, as the CPU
    # engine does (moe_sglang.expert_budget.redirect_dropped; its MoE cannot skip a slot), instead of at id E
    redirect: bool = False
    unique: list[int] = field(default_factory=list)  # [num_layers] unique experts touched by the last forward
    dropped: int = 0  # token-expert slots the budget removed in the last forward (truncation)

    def reset(self) -> None:
        self.unique, self.dropped = [], 0


@contextlib.contextmanager
def probed_routers(model: torch.nn.Module) -> Iterator[RoutingProbe]:
    """Patch every Mixtral router of `model`, and run its experts in their eager form, for the duration of the
    block."""
    probe = RoutingProbe()
    configs = {id(m.config): m.config for m in model.modules() if type(m).__name__ == "MixtralExperts"}.values()
    before = [c._experts_implementation for c in configs]
    for config in configs:
        config._experts_implementation = "eager"  # skips id E (module docstring)
    try:
        with _patched(model, "MixtralTopKRouter", lambda router: _routed(router, probe)):
            yield probe
    finally:
        for config, implementation in zip(configs, before, strict=True):
            config._experts_implementation = implementation


@contextlib.contextmanager
def _patched(model: torch.nn.Module, kind: str, make) -> Iterator[None]:
    """Every module of class `kind` in `model` runs `make(module)` as its forward for the duration of the block."""
    modules = [m for m in model.modules() if type(m).__name__ == kind]
    if not modules:
        raise ValueError(f"{type(model).__name__} has no {kind} modules")
    originals = [m.forward for m in modules]
    for module in modules:
        module.forward = make(module)
    try:
        yield
    finally:
        for module, forward in zip(modules, originals, strict=True):
            module.forward = forward


# whose expert products a bench's forwards run: the engine's (engine-walks: without the stream kernel's AMX forms,
# as `--cpu-gemm walks`), transformers'
EXPERTS = ("engine", "engine-walks", "transformers")


@contextlib.contextmanager
def expert_products(model: torch.nn.Module, probe: RoutingProbe, experts: str) -> Iterator[None]:
    """`experts` = "engine": the engine's products (engine_experts), truncated slots redirected as the engine does;
    "engine-walks": the same without the AMX forms; "transformers": the model's own."""
    if experts not in EXPERTS:
        raise ValueError(f"experts {experts!r}: expected one of {EXPERTS}")
    if experts == "transformers":
        yield
        return
    probe.redirect = True
    try:
        from moe_sglang.cpu_moe import CANDIDATES

        with engine_experts(model, CANDIDATES["walks" if experts == "engine-walks" else "tuned"]):
            yield
    finally:
        probe.redirect = False


@contextlib.contextmanager
def engine_experts(model: torch.nn.Module, candidates: tuple[str, ...] = FORMS) -> Iterator[GemmPlan]:
    """Run every Mixtral expert block of `model` with the CPU engine's expert products for the duration of the block:
    its weights as the engine keeps them (kept_weights), a `GemmPlan` tuned here on them (every form per row count, as
    the engine's first forward does). Like the engine's MoE it cannot skip a slot: under a truncating budget set `RoutingProbe.redirect`."""
    block = next((m for m in model.modules() if type(m).__name__ == "MixtralExperts"), None)
    if block is None:
        raise ValueError(f"{type(model).__name__} has no MixtralExperts modules")
    plan = GemmPlan(candidates=candidates).tune(kept_weights(block), inputs=torch.float32)  # every layer: one shape
    with _patched(model, "MixtralExperts", lambda experts: _planned(experts, plan)):
        yield plan


def kept_weights(block) -> list[torch.Tensor]:
    """A block's (w13, w2) as the engine keeps them by default (EngineSettings.expert_weights): bfloat16 where every
    value of both is one (a bfloat16 checkpoint's, as cpu_moe._store decides), else its float32 weights."""
    from moe_sglang.cpu_moe import exact_bf16
    from moe_sglang.settings import EngineSettings

    weights = [block.gate_up_proj.detach(), block.down_proj.detach()]
    if EngineSettings().expert_weights != "bf16-exact" or any(w.dtype != torch.float32 for w in weights):
        return weights
    narrow = [exact_bf16(w) for w in weights]
    return weights if any(n is None for n in narrow) else narrow


def _planned(block, plan: GemmPlan):
    w13, w2 = kept_weights(block)

    def forward(hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor):
        if bool((top_k_index >= block.num_experts).any()):
            raise ValueError("a dropped slot (id E) reached the engine's experts: set RoutingProbe.redirect")
        return moe_experts(plan, hidden_states, w13, w2, top_k_index, top_k_weights)

    return forward


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
    if probe.redirect:
        from moe_sglang.expert_budget import redirect_dropped

        return redirect_dropped(ids, mask, torch.softmax(logits.float(), dim=-1)), weights
    return torch.where(keep, ids, torch.full_like(ids, num_experts)), weights  # id E: skipped by MixtralExperts
