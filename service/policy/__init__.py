"""Speculation policies: per request, how many tokens to draft (K, 0 = plain decode), how many to verify, and an
optional expert budget per MoE layer. Pure Python: no torch, no sglang, no I/O, no clock (time is passed in).

Use from an engine hook, once per decode step:

    policy = make_policy("moe-serve", num_experts=64, top_k=8, num_layers=16)   # see available_policies()
    decision = policy.decide(BatchView(now, requests, max_k))     # before drafting: K per request
    ...draft max(K) steps; request r keeps its first K_r drafts...
    decision = policy.trim(BatchView(now, requests_with_confidences, max_k), decision)   # verify_len per request
    ...verify decision.requests[i].verify_len drafts of request i (budget: decision.expert_budget)...
    policy.observe(StepStats(now, batch_size, per_request_k_and_accepted, draft_s, verify_s, other_s,
                             unique_experts, context_tokens, draft_steps))

Nouns (types.py): RequestView (id, tenant, SloClass(ttft_s, tpot_s), tokens so far, context length, recent accepts,
draft confidences) → BatchView; Decision of RequestDecision(k, verify_len) + expert_budget; StepStats of
RequestStepStats(k, accepted). `decision.requests` is in the batch's order. Costs are microseconds per request.

Policies (one file each, rule in the docstring): static, sglang-adaptive, cascade, adaspec, moe-serve.
Building blocks: cost_model (MoESD), budget (MoE-Spec B per layer), governor (MoE-SpeQ k*), least_squares,
acceptance, slo. sim + sim_config: a step-level MoE batch simulator (bench/policy_sim.py, tests).
"""

from service.policy.base import SpeculationPolicy, available_policies, make_policy
from service.policy.types import (
    BatchView,
    Decision,
    RequestDecision,
    RequestStepStats,
    RequestView,
    ShadowOutcome,
    SloClass,
    StepStats,
)

__all__ = [
    "BatchView",
    "Decision",
    "RequestDecision",
    "RequestStepStats",
    "RequestView",
    "ShadowOutcome",
    "SloClass",
    "SpeculationPolicy",
    "StepStats",
    "available_policies",
    "make_policy",
]
