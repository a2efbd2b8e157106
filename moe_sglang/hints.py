"""Per-request hints from the gateway, as the engine reads them.

Wire shape (written by service/gateway/hints.py; with SGLang's `/generate` put it in `sampling_params.custom_params`,
with `/v1/completions` and `/v1/chat/completions` as the top-level `custom_params`, which SGLang copies there):

    "custom_params": {"moe_serve": {"tenant": "acme", "slo_class": "interactive", "ttft_ms": 300.0, "tpot_ms": 50.0,
                                    "policy": "moe-serve", "allow_lossy_budget": false,
                                    "max_k": 3, "expert_budget": 6}}

Every field is optional. A request with no `moe_serve` hints at all (e.g. straight to SGLang, not through the
gateway) gets the engine's default policy (settings.py), by default NO_POLICY, which keeps SGLang's own
behaviour (every request verifies the drafter's full depth, no policy consulted). `policy` picks the speculation policy for this request (`_` and `-` are the same, so the
gateway's `moe_serve` is `moe-serve`); `max_k` caps the policy's K for this request (0 = no speculation);
`expert_budget` caps the experts per MoE layer in verification, honoured only with `allow_lossy_budget`.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.policy import SloClass

HINTS_KEY = "moe_serve"
DEFAULT_POLICY = "moe-serve"  # for hinted requests that name no policy, and for unknown names
NO_POLICY = "sglang"  # label of requests decided by SGLang alone (K = the drafter's full depth)


@dataclass(frozen=True)
class RequestHints:
    tenant: str = "default"  # tenant name
    slo: SloClass | None = None  # latency class; None = best effort
    policy: str = DEFAULT_POLICY  # speculation policy name (registry spelling)
    allow_lossy_budget: bool = False  # may the verify forward drop experts for this request
    max_k: int | None = None  # draft tokens, cap on the policy's K; None = no cap
    expert_budget: int | None = None  # experts per MoE layer, cap on the policy's budget; None = no cap


def policy_name(raw: str) -> str:
    return raw.strip().replace("_", "-")


def parse_hints(custom_params: object, no_hint_policy: str = NO_POLICY) -> RequestHints:
    """Hints of one request; a request without them gets `no_hint_policy`. Malformed values raise ValueError."""
    raw = custom_params.get(HINTS_KEY) if isinstance(custom_params, dict) else None
    if raw is None:
        return RequestHints(policy=policy_name(no_hint_policy))
    if not isinstance(raw, dict):
        raise ValueError(f"custom_params[{HINTS_KEY!r}] must be an object, got {type(raw).__name__}")
    slo = None
    if raw.get("slo_class") or raw.get("ttft_ms") is not None or raw.get("tpot_ms") is not None:
        slo = SloClass(
            name=str(raw.get("slo_class") or "custom"),
            ttft_s=_seconds(raw.get("ttft_ms")),
            tpot_s=_seconds(raw.get("tpot_ms")),
        )
    return RequestHints(
        tenant=str(raw.get("tenant") or "default"),
        slo=slo,
        policy=policy_name(str(raw.get("policy") or DEFAULT_POLICY)),
        allow_lossy_budget=bool(raw.get("allow_lossy_budget", False)),
        max_k=_count(raw.get("max_k"), "max_k"),
        expert_budget=_count(raw.get("expert_budget"), "expert_budget"),
    )


def _seconds(ms: object) -> float | None:
    return None if ms is None else float(ms) / 1000.0


def _count(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"hint {name} must be an integer >= 0, got {value!r}")
    return value
