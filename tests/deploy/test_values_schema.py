"""values.schema.json refuses bad values before anything renders, and accepts what the gateway itself accepts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.deploy.chart import CHART, gpu_values, helm

GOOD_TENANT = {"name": "acme", "key_sha256": ["a" * 64], "rpm": 60, "tpm": 100000}

BAD = [
    ({"engine": {"device": "tpu"}}, "/engine/device"),
    ({"engine": {"device": "cuda", "gpus": 0}}, "/engine/gpus"),
    ({"engine": {"speculative": "eagle"}}, "/engine/speculative"),
    ({"engine": {"port": 70000}}, "/engine/port"),
    ({"engine": {"shmSize": "lots"}}, "/engine/shmSize"),
    ({"engine": {"sglangArgs": "--tp-size 2"}}, "/engine/sglangArgs"),
    ({"engine": {"keda": {"prometheusAddress": "prometheus:9090"}}}, "/engine/keda/prometheusAddress"),
    ({"gateway": {"replicas": "2"}}, "/gateway/replicas"),
    ({"gateway": {"engineUrls": ["engine:30000"]}}, "/gateway/engineUrls/0"),
    ({"gateway": {"hpa": {"targetCPUUtilizationPercentage": 150}}}, "/gateway/hpa/targetCPUUtilizationPercentage"),
    ({"gateway": {"logLevel": "loud"}}, "/gateway/logLevel"),
    ({"tenants": [GOOD_TENANT | {"rpm": 0}]}, "/tenants/0/rpm"),
    ({"tenants": [GOOD_TENANT | {"key_sha256": ["not-a-digest"]}]}, "/tenants/0/key_sha256/0"),
    ({"tenants": [GOOD_TENANT | {"api_key": "sk-plain"}]}, "/tenants/0"),
    ({"tenants": [GOOD_TENANT | {"slo": {"name": "x", "ttft_ms": 0, "tpot_ms": 1}}]}, "/tenants/0/slo/ttft_ms"),
    ({"tenants": [{"name": "acme", "rpm": 1}]}, "/tenants/0"),
    ({"redis": {"external": {"url": "http://redis:6379"}}}, "/redis/external/url"),
    ({"serviceMonitor": {"interval": "often"}}, "/serviceMonitor/interval"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"typo": True}, "additional properties 'typo'"),
]


@pytest.mark.parametrize(("values", "where"), BAD, ids=[w for _, w in BAD])
def test_bad_values_are_rejected_naming_the_key(values, where):
    chart = helm().Chart.load(CHART)
    with pytest.raises(helm().HelmValuesError) as error:
        chart.render(values)
    assert where in str(error.value)


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"tenants": [GOOD_TENANT]},
        {"engine": {"maxRunningRequests": 64, "sglangArgs": ["--tp-size", "2"]}},
        {"redis": {"enabled": False, "external": {"url": "rediss://user:pw@redis:6380/1"}}},
    ],
)
def test_good_values_pass(values):
    helm().Chart.load(CHART).validate_schema(values)


def test_production_tenants_load_in_the_gateway():
    tenants = pytest.importorskip("service.gateway.tenants", reason="the gateway (issue 5) is not on this branch yet")
    loaded = [tenants.tenant_from_dict(raw) for raw in gpu_values()["tenants"]]
    assert [t.name for t in loaded] == ["interactive-team", "batch-jobs"]


# A valid tenant, and values of the kinds a YAML file can hold to put in place of its fields (valid or not).
_VALID = {
    "name": "acme",
    "key_sha256": ["a" * 64],
    "rpm": 60,
    "tpm": 1000,
    "priority": 1,
    "slo": {"name": "interactive", "ttft_ms": 300, "tpot_ms": 50},
    "policy": "auto",
    "allow_lossy_budget": False,
    "allowed_policies": ["static", "moe_serve"],
    "max_k": 3,
    "min_expert_budget": 2,
}
_FIELDS = (
    *_VALID,
    "api_key",
    "slo.name",
    "slo.ttft_ms",
    "slo.tpot_ms",
    "slo.extra",
    "key_sha256.0",
    "allowed_policies.0",
)
_DELETED = object()
_EDGES = (
    _DELETED,
    None,
    True,
    False,
    0,
    -1,
    1,
    2.5,
    "",
    "x",
    "1",
    [],
    {},
    ["a" * 64],
    "a" * 64,
    "A" * 64,
    "0" * 63 + "f",
)


def _mutated(mutations) -> dict:
    tenant = {**_VALID, "slo": dict(_VALID["slo"]), "key_sha256": list(_VALID["key_sha256"])}
    tenant["allowed_policies"] = list(_VALID["allowed_policies"])
    for field, value in mutations:
        parent, _, child = field.partition(".")
        target, key = tenant, parent
        if child:
            target, key = tenant.get(parent), (0 if isinstance(tenant.get(parent), list) else child)
            if not isinstance(target, dict | list) or (isinstance(target, list) and not target):
                continue
        if value is _DELETED:
            if isinstance(target, dict):
                target.pop(key, None)
        else:
            target[key] = value
    return tenant


def _schema_admits(chart, tenant) -> bool:
    try:
        chart.validate_schema({"tenants": [tenant]})
    except helm().HelmValuesError:
        return False
    return True


def _gateway_refusal(gateway, tenant) -> str | None:
    try:
        gateway.tenant_from_dict(tenant)
    except ValueError as error:
        return str(error)
    return None


def test_schema_never_admits_a_tenant_the_gateway_refuses_single_changes():
    """values.schema.json may be stricter than the gateway, never looser: every one-field change it passes, the gateway
    loads too (all fields x all edge values)."""
    gateway = pytest.importorskip("service.gateway.tenants", reason="the gateway (issue 5) is not on this branch yet")
    chart = helm().Chart.load(CHART)
    looser = []
    for field in _FIELDS:
        for value in _EDGES:
            tenant = _mutated([(field, value)])
            if _schema_admits(chart, tenant) and (refusal := _gateway_refusal(gateway, tenant)):
                looser.append(f"{field}={value!r}: {refusal}")
    assert not looser, looser


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_FIELDS), st.sampled_from(_EDGES)), min_size=2, max_size=3))
def test_schema_never_admits_a_tenant_the_gateway_refuses(mutations):
    gateway = pytest.importorskip("service.gateway.tenants", reason="the gateway (issue 5) is not on this branch yet")
    tenant = _mutated(mutations)
    if _schema_admits(helm().Chart.load(CHART), tenant):
        assert _gateway_refusal(gateway, tenant) is None


def test_schema_names_the_policies_the_gateway_knows():
    speculation = pytest.importorskip("service.gateway.speculation")
    schema = json.loads((CHART / "values.schema.json").read_text())
    names = set(schema["definitions"]["tenant"]["properties"]["allowed_policies"]["items"]["enum"]) - {"*"}
    assert {speculation.policy_name(n) for n in names} == set(speculation.known_policies())
