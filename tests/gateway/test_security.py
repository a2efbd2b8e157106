"""Security properties as tests: only /health, /ready and /metrics answer without a key; the admin API needs the admin
key; keys never reach logs, metrics labels or the engine; request fields cannot raise a tenant's limits, policy or
budget."""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from service.gateway.hints import engine_hints
from tests.gateway.conftest import ADMIN_KEY, KEY, OTHER_KEY, SLOW

PUBLIC = {"/health", "/ready", "/metrics"}
WRONG = "sk-wrong-but-plausible-4f1c9"


def every_route(app) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves (its OpenAPI paths and the API description itself), path
    parameters filled in."""
    out = [("GET", "/openapi.json")]
    for path, operations in app.openapi()["paths"].items():
        out += [(method.upper(), re.sub(r"\{[^}]+\}", "acme", path)) for method in operations]
    return out


def test_only_ops_endpoints_answer_without_a_valid_key(gateway, served_gateway, fresh_engine):
    routes = every_route(served_gateway[0])
    assert {path for _, path in routes} >= PUBLIC | {"/v1/completions", "/v1/chat/completions", "/openapi.json"}
    for method, path in routes:
        for headers in ({}, {"Authorization": f"Bearer {WRONG}"}, {"Authorization": WRONG}):
            response = httpx.request(method, gateway + path, headers=headers, json={})
            if path in PUBLIC:
                assert response.status_code == 200, (method, path)
            else:
                assert response.status_code == 401, (method, path, response.status_code)
                assert response.json()["error"]["type"] == "authentication_error"
    for path in ("/docs", "/redoc"):
        assert httpx.get(gateway + path).status_code == 404  # no public documentation pages
    assert fresh_engine[1].requests == []


def test_admin_api_needs_the_admin_key(gateway, served_gateway):
    admin_routes = [(m, p) for m, p in every_route(served_gateway[0]) if p.startswith("/admin")]
    assert len(admin_routes) >= 4
    for method, path in admin_routes:
        for key in (KEY, OTHER_KEY, WRONG):  # a tenant key is not an admin key, even for its own tenant
            response = httpx.request(method, gateway + path, headers={"Authorization": f"Bearer {key}"},
                                     json={"rpm": 10**9, "tpm": 10**9})  # fmt: skip
            assert response.status_code == 401, (method, path, key)
    listed = httpx.get(gateway + "/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert listed.status_code == 200
    assert {t["name"]: t["rpm"] for t in listed.json()["tenants"]} == {"acme": 10_000, "slow": SLOW.rpm}


def test_keys_never_reach_logs_metrics_or_the_engine(gateway, fresh_engine, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "sk-created-by-admin-77e1"
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 2}
    httpx.put(gateway + "/admin/tenants/newco", headers=admin, json={"api_keys": [secret], "rpm": 5, "tpm": 500})
    httpx.put(gateway + "/admin/tenants/thief", headers=admin, json={"api_keys": [KEY], "rpm": 5, "tpm": 500})
    for key in (KEY, OTHER_KEY, secret, WRONG, ADMIN_KEY):
        auth = {"Authorization": f"Bearer {key}"}
        httpx.post(gateway + "/v1/completions", headers=auth, json=body)
        httpx.post(gateway + "/v1/completions", headers=auth, json={**body, "max_tokens": 10**6})  # 429
        httpx.post(gateway + "/v1/chat/completions", headers=auth, json={"model": "nope", "messages": []})
    fresh_engine[0].fail_status = 503
    httpx.post(gateway + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"}, json=body)  # engine error
    metrics = httpx.get(gateway + "/metrics").text
    engine_saw = repr(fresh_engine[1].requests) + repr(fresh_engine[1].headers)
    assert fresh_engine[1].requests, "the engine was reached"
    for key in (KEY, OTHER_KEY, secret, WRONG, ADMIN_KEY):
        assert key not in caplog.text
        assert key not in metrics
        assert key not in engine_saw
    assert all("authorization" not in h for h in fresh_engine[1].headers)


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_request_fields_cannot_raise_limits_policy_or_budget(gateway, fresh_engine, endpoint):
    """Tenant "slow" (2 RPM, priority 0, policy auto, no lossy budget) asks for more in every way it could."""
    raise_myself = {
        "rpm": 10**9, "tpm": 10**9, "priority": 100, "policy": "static", "allow_lossy_budget": True,
        "expert_budget": 1, "max_in_flight": 10**6, "tenant": "acme", "rid": "mine", "slo_class": "interactive",
        "custom_params": {"moe_serve": {"tenant": "acme", "policy": "static", "allow_lossy_budget": True,
                                        "expert_budget": 1, "priority": 100, "max_k": 8}},
        "moe_serve": {"policy": "static"}, "return_spec_tokens_details": False, "custom_logit_processor": "x",
    }  # fmt: skip
    body = {"model": "tiny-moe", "max_tokens": 2, **raise_myself}
    body |= {"prompt": "hi"} if endpoint == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {OTHER_KEY}", "x-moe-serve-tenant": "acme", "x-ratelimit-limit-requests": "9"}
    statuses = [httpx.post(gateway + endpoint, json=body, headers=headers).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]  # still 2 requests per minute
    for sent in fresh_engine[1].requests:
        assert sent["custom_params"] == {"moe_serve": engine_hints(SLOW)}
        assert sent["priority"] == SLOW.priority and sent["rid"].startswith("moe-")
        assert sent["return_spec_tokens_details"] is True
        assert not {"rpm", "tpm", "policy", "allow_lossy_budget", "expert_budget", "max_in_flight", "tenant",
                    "moe_serve", "custom_logit_processor", "slo_class"} & set(sent)  # fmt: skip
