"""What the gateway tells the engine about each request: the tenant's service level and speculation permissions.

Wire shape (read by the moe-serve SGLang plugin from `req.sampling_params.custom_params["moe_serve"]`):

    "custom_params": {"moe_serve": {"tenant": "acme", "slo_class": "interactive", "ttft_ms": 300.0, "tpot_ms": 50.0,
                                    "policy": "moe_serve", "allow_lossy_budget": false, "priority": 10,
                                    "max_k": 2, "expert_budget": 4}}

`max_k` and `expert_budget` are present only when the tenant or the request's `speculation` field set them
(speculation.py decides what a request may ask).

One flat level of JSON scalars, because SGLang types custom_params values as scalars, lists of scalars or one-level
dicts of scalars (sampling_params.CustomParamValue) so they survive its msgpack IPC. A stock SGLang ignores the key.
"""

from __future__ import annotations

from typing import Any

from service.gateway.speculation import SpeculationGrant, grant
from service.gateway.tenants import Tenant

HINTS_KEY = "moe_serve"


def engine_hints(tenant: Tenant, speculation: SpeculationGrant | None = None) -> dict[str, Any]:
    speculation = speculation or grant(tenant, None)
    hints = {
        "tenant": tenant.name,
        "slo_class": tenant.slo.name,
        "ttft_ms": tenant.slo.ttft_ms,
        "tpot_ms": tenant.slo.tpot_ms,
        "policy": speculation.policy,
        "allow_lossy_budget": speculation.allow_lossy_budget,
        "priority": tenant.priority,
    }
    if speculation.max_k is not None:
        hints["max_k"] = speculation.max_k
    if speculation.expert_budget is not None:
        hints["expert_budget"] = speculation.expert_budget
    return hints


def engine_body(
    user_fields: dict[str, Any],
    tenant: Tenant,
    rid: str,
    *,
    forward_priority: bool,
    speculation: SpeculationGrant | None = None,
) -> dict[str, Any]:
    """The JSON sent to SGLang: the user's validated OpenAI fields plus fields only the gateway may set."""
    body = dict(user_fields)
    body["rid"] = rid
    body["custom_params"] = {HINTS_KEY: engine_hints(tenant, speculation)}
    # SGLang's sglext (our per-tenant metrics) and the moe-serve plugin's metrics.speculative_decoding (the client's,
    # when its `speculation.stats` asks; relay.py strips both otherwise)
    body["return_spec_tokens_details"] = True
    if forward_priority:
        body["priority"] = tenant.priority
    if body.get("stream"):
        # Usage is needed for TPM accounting and token metrics even when the client did not ask for it.
        body["stream_options"] = {"include_usage": True}
    return body
