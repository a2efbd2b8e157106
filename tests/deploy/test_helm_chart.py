"""The chart lints and renders with its default (CPU) and GPU/production values, and the objects it renders are valid
Kubernetes (kubernetes-validate's schemas, strict: unknown fields fail) and wired to what the images really run."""

from __future__ import annotations

import pytest

from tests.deploy.chart import CHART, NAMESPACE, RELEASE, by_kind, container, gpu_values, helm, manifests, render

# ids must not be "gpu": tests/conftest.py skips items with that keyword where CUDA is absent
VALUE_SETS = ("default", "production")
KUBE_VERSIONS = ("1.30.0", "1.37.0")  # oldest and newest Kubernetes we check against
CRD_KINDS = {"ServiceMonitor", "ScaledObject"}  # not in Kubernetes' own schemas: checked by hand below


def _values(name):
    return gpu_values() if name == "production" else None


@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint_strict(name):
    report = helm().lint(CHART, _values(name), strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


@pytest.mark.parametrize("name", VALUE_SETS)
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_manifests_validate_against_kubernetes_schemas(name, kube):
    kv = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (pip install '.[deploy]')"
    )
    objects = manifests(_values(name))
    assert objects
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        kv.validate(obj, kube, strict=True)


def test_default_renders_the_cpu_embedded_stack():
    objects = manifests()
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == [
        ("ConfigMap", f"{RELEASE}-moe-serve-tenants"),
        ("Deployment", f"{RELEASE}-moe-serve-engine"),
        ("Deployment", f"{RELEASE}-moe-serve-gateway"),
        ("Deployment", f"{RELEASE}-moe-serve-redis"),
        ("Service", f"{RELEASE}-moe-serve-engine"),
        ("Service", f"{RELEASE}-moe-serve-gateway"),
        ("Service", f"{RELEASE}-moe-serve-redis"),
    ]
    engine = container(objects, f"{RELEASE}-moe-serve-engine")
    assert engine["image"] == "moe-serve:0.1.0-cpu"
    assert "nvidia.com/gpu" not in engine["resources"].get("limits", {})
    gateway = container(objects, f"{RELEASE}-moe-serve-gateway")
    assert f"--engine-url=http://{RELEASE}-moe-serve-engine:30000" in gateway["args"]
    assert {"name": "REDIS_URL", "value": f"redis://{RELEASE}-moe-serve-redis:6379/0"} in gateway["env"]


def test_gpu_values_render_production_objects():
    objects = manifests(gpu_values())
    engine_name = f"{RELEASE}-moe-serve-engine"
    engine = container(objects, engine_name)
    assert engine["image"] == "registry.example.com/moe-serve:0.1.0-gpu"
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--device=cuda" in engine["args"]
    pod = by_kind(objects, "Deployment")[engine_name]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": "moe-models", "readOnly": True}
    assert "replicas" not in by_kind(objects, "Deployment")[engine_name]["spec"]  # KEDA owns the count
    hpa = by_kind(objects, "HorizontalPodAutoscaler")[f"{RELEASE}-moe-serve-gateway"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == f"{RELEASE}-moe-serve-gateway"
    assert not by_kind(objects, "Secret"), "production values must reference Secrets, not carry them"
    gateway_env = {e["name"]: e for e in container(objects, f"{RELEASE}-moe-serve-gateway")["env"]}
    assert gateway_env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "moe-serve-redis", "key": "redis-url"}
    assert gateway_env["MOE_SERVE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "moe-serve-admin"


def test_gpu_custom_resources_have_the_fields_their_operators_need():
    objects = manifests(gpu_values())
    monitor = by_kind(objects, "ServiceMonitor")[f"{RELEASE}-moe-serve"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["jobLabel"] == "moe-serve.io/job"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    services = by_kind(objects, "Service")
    # the job label values are what deploy/prometheus/rules match
    assert {s["metadata"]["labels"].get("moe-serve.io/job") for s in services.values()} == {
        "moe-serve-engine",
        "moe-serve-gateway",
    }
    scaled = by_kind(objects, "ScaledObject")[f"{RELEASE}-moe-serve-engine"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"] == {"name": f"{RELEASE}-moe-serve-engine"}
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and "sglang:num_queue_reqs" in trigger["metadata"]["query"]
    assert trigger["metadata"]["threshold"] == "16"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_pod_runs_as_non_root_without_privilege_escalation(name):
    for deployment in by_kind(manifests(_values(name)), "Deployment").values():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_inline_secrets_go_to_a_secret_never_to_env_values():
    objects = manifests(
        {"adminKey": {"value": "sk-admin-dev"}, "redis": {"enabled": False, "external": {"url": "redis://r:6379/0"}}}
    )
    (secret,) = by_kind(objects, "Secret").values()
    assert secret["stringData"] == {"admin-key": "sk-admin-dev", "redis-url": "redis://r:6379/0"}
    env = {e["name"]: e for e in container(objects, f"{RELEASE}-moe-serve-gateway")["env"]}
    assert env["MOE_SERVE_ADMIN_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": secret["metadata"]["name"],
        "key": "admin-key",
    }
    assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": "redis-url"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"engine": {"speculative": "standalone"}}, "needs engine.draftModelPath"),
        ({"redis": {"enabled": False}, "gateway": {"replicas": 2}}, "need a shared Redis"),
        ({"redis": {"enabled": False}, "gateway": {"hpa": {"enabled": True}}}, "need a shared Redis"),
    ],
)
def test_inconsistent_values_fail_with_a_reason(values, message):
    with pytest.raises(helm().HelmError, match=message):
        render(values)


def test_notes_tell_how_to_reach_the_gateway():
    notes = render()["moe-serve/templates/NOTES.txt"]
    assert f"svc/{RELEASE}-moe-serve-gateway" in notes
    assert "No tenants are configured" in notes and "/admin is disabled" in notes


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        ([{"name": "a", "rpm": 1, "tpm": 1}, {"name": "a", "rpm": 2, "tpm": 2}], 'duplicate tenant name "a"'),
        (
            [
                {"name": "a", "rpm": 1, "tpm": 1, "key_sha256": ["b" * 64]},
                {"name": "c", "rpm": 1, "tpm": 1, "key_sha256": ["b" * 64]},
            ],
            "given to two tenants",
        ),
    ],
)
def test_duplicate_tenants_fail_like_the_gateway_would(tenants, message):
    with pytest.raises(helm().HelmError, match=message):
        render({"tenants": tenants})


def test_tenants_reach_the_gateway_file_unchanged():
    import yaml

    values = gpu_values()
    (config_map,) = by_kind(manifests(values), "ConfigMap").values()
    assert yaml.safe_load(config_map["data"]["tenants.yaml"]) == {"tenants": values["tenants"]}
