"""values.schema.json refuses bad values before anything renders, and accepts what the gateway itself accepts."""

from __future__ import annotations

import pytest

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
