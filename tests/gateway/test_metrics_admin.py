"""Prometheus metrics exposed with `moe_serve:` names; tenant management behind the admin key."""

from __future__ import annotations

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import ADMIN_KEY, KEY

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def scrape(gateway: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(gateway + "/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_after_traffic(gateway):
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)
    client.completions.create(model="tiny-moe", prompt="one two three", max_tokens=4)
    list(client.completions.create(model="tiny-moe", prompt="one", max_tokens=6, stream=True))
    httpx.post(gateway + "/v1/completions", json={"model": "tiny-moe", "prompt": "x"})  # 401
    samples = scrape(gateway)
    acme = (("tenant", "acme"),)
    assert (
        samples[("moe_serve:requests_total", (("endpoint", "/v1/completions"), ("status", "200"), ("tenant", "acme")))]
        == 2
    )
    assert (
        samples[("moe_serve:requests_total", (("endpoint", "/v1/completions"), ("status", "401"), ("tenant", "")))] == 1
    )
    assert samples[("moe_serve:prompt_tokens_total", acme)] == 3 + 1
    assert samples[("moe_serve:generation_tokens_total", acme)] == 4 + 6
    assert samples[("moe_serve:time_to_first_token_seconds_count", acme)] == 2
    assert samples[("moe_serve:inter_token_latency_seconds_count", acme)] == 5  # 6 streamed chunks, 5 gaps
    assert samples[("moe_serve:e2e_request_latency_seconds_count", acme)] == 2
    assert samples[("moe_serve:requests_in_flight", acme)] == 0
    # the double sends both SGLang's sglext and the plugin's summary: the summary counts (one step per token after
    # the first, K = 2 each, nothing accepted; engine_double._stats), once per request
    assert samples[("moe_serve:spec_verify_steps_total", acme)] == (4 - 1) + (6 - 1)
    assert samples[("moe_serve:spec_proposed_drafts_total", acme)] == 2 * ((4 - 1) + (6 - 1))
    assert samples[("moe_serve:spec_accepted_drafts_total", acme)] == 0
    assert all(name.startswith("moe_serve:") for name, _ in samples if not name.startswith(("python_", "process_")))
    assert any(name == "moe_serve:engine_replica_healthy" and value == 1 for (name, _), value in samples.items())


def test_spec_metrics_from_sglext_without_the_plugin_summary():
    """An engine without the moe-serve plugin sends only SGLang's SpecTokensDetails: those are counted."""
    from prometheus_client import generate_latest

    from service.gateway.metrics import GatewayMetrics

    metrics = GatewayMetrics(lambda: [])
    details = {"spec_accept_length": 2.0, "spec_num_proposed_drafts": 9, "spec_num_correct_drafts": 3,
               "spec_verify_ct": 3}  # fmt: skip
    metrics.observe_spec("t", {"spec_tokens_details": [details, {"spec_verify_ct": 0}]}, None)
    metrics.observe_spec("t", None, {"num_spec_steps": 0})  # a request that never speculated: nothing
    text = generate_latest(metrics.registry).decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if s.labels}
    assert values["moe_serve:spec_proposed_drafts_total"] == 9
    assert values["moe_serve:spec_accepted_drafts_total"] == 3
    assert values["moe_serve:spec_verify_steps_total"] == 3


def test_rate_limited_counter(gateway):
    slow = {"Authorization": "Bearer sk-slow-test"}
    body = {"model": "tiny-moe", "prompt": "x", "max_tokens": 1}
    for _ in range(3):
        httpx.post(gateway + "/v1/completions", json=body, headers=slow)
    assert scrape(gateway)[("moe_serve:rate_limited_total", (("limit", "requests"), ("tenant", "slow")))] == 1


def test_admin_requires_admin_key(gateway):
    assert httpx.get(gateway + "/admin/tenants").status_code == 401
    assert httpx.get(gateway + "/admin/tenants", headers={"Authorization": f"Bearer {KEY}"}).status_code == 401
    listed = httpx.get(gateway + "/admin/tenants", headers=ADMIN).json()["tenants"]
    assert [t["name"] for t in listed] == ["acme", "slow"]
    assert KEY not in str(listed)  # digests only


def test_admin_creates_updates_and_deletes_a_tenant(gateway, fresh_engine):
    spec = {"api_keys": ["sk-new"], "rpm": 5, "tpm": 5000, "priority": 3, "policy": "static",
            "slo": {"name": "batch", "ttft_ms": 5000, "tpot_ms": 500}}  # fmt: skip
    created = httpx.put(gateway + "/admin/tenants/newco", json=spec, headers=ADMIN)
    assert created.status_code == 200, created.text
    assert "sk-new" not in created.text and len(created.json()["key_sha256"]) == 1
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="sk-new", max_retries=0)
    client.completions.create(model="tiny-moe", prompt="x", max_tokens=1)
    hints = fresh_engine[1].requests[-1]["custom_params"]["moe_serve"]
    assert hints["tenant"] == "newco" and hints["slo_class"] == "batch" and hints["policy"] == "static"

    bad = httpx.put(gateway + "/admin/tenants/newco", json={**spec, "rpm": -1}, headers=ADMIN)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_tenant"
    taken = httpx.put(gateway + "/admin/tenants/thief", json={**spec, "api_keys": [KEY]}, headers=ADMIN)
    assert taken.status_code == 400  # a key belongs to one tenant

    assert httpx.delete(gateway + "/admin/tenants/newco", headers=ADMIN).status_code == 200
    refused = httpx.post(
        gateway + "/v1/completions",
        json={"model": "tiny-moe", "prompt": "x"},
        headers={"Authorization": "Bearer sk-new"},
    )
    assert refused.status_code == 401
    assert httpx.delete(gateway + "/admin/tenants/newco", headers=ADMIN).status_code == 404


def test_health_and_ready(gateway):
    assert httpx.get(gateway + "/health").json() == {"status": "ok"}
    assert httpx.get(gateway + "/ready").status_code == 200
