"""Tenant files and the CLI edge: good files load, every bad field is a clear error, keys are kept hashed."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from service.cli import build_parser
from service.gateway.cli import add_arguments, build_config
from service.gateway.tenants import TenantRegistry, hash_key, load_tenants_file, tenant_from_dict, tenant_to_dict

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "tenants.example.yaml"
GOOD = {"name": "t", "key_sha256": [hash_key("k")], "rpm": 1, "tpm": 1}


def test_example_file_loads_and_its_documented_keys_authenticate():
    tenants = load_tenants_file(EXAMPLE)
    registry = TenantRegistry(tenants)
    assert registry.authenticate("sk-example-interactive").name == "interactive-app"
    assert registry.authenticate("sk-example-batch").name == "batch-jobs"
    assert registry.authenticate("sk-nope") is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": ""}, "name"),
        ({"rpm": 0}, "rpm"),
        ({"tpm": "10"}, "tpm"),
        ({"rpm": True}, "rpm"),
        ({"key_sha256": ["abc"]}, "key_sha256"),
        ({"key_sha256": ["A" * 64]}, "key_sha256"),
        ({"slo": {"name": "x", "ttft_ms": 1}}, "slo"),
        ({"slo": {"name": "x", "ttft_ms": 0, "tpot_ms": 1}}, "slo"),
        ({"priority": 1.5}, "priority"),
        ({"policy": ""}, "policy"),
        ({"allow_lossy_budget": "yes"}, "allow_lossy_budget"),
        ({"api_key": "plain"}, "unknown fields"),
    ],
)
def test_bad_tenant_fields(change, message):
    with pytest.raises(ValueError, match=message):
        tenant_from_dict({**GOOD, **change})


def test_round_trip():
    tenant = tenant_from_dict({**GOOD, "slo": {"name": "i", "ttft_ms": 1, "tpot_ms": 2}, "allow_lossy_budget": True})
    assert tenant_from_dict(tenant_to_dict(tenant)) == tenant


def test_duplicate_names_and_shared_keys_are_refused(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("tenants:\n  - {name: a, rpm: 1, tpm: 1}\n  - {name: a, rpm: 1, tpm: 1}\n")
    with pytest.raises(ValueError, match="duplicate"):
        load_tenants_file(path)
    registry = TenantRegistry((tenant_from_dict(GOOD),))
    with pytest.raises(ValueError, match="already used"):
        registry.put(tenant_from_dict({**GOOD, "name": "other"}))
    with pytest.raises(ValueError, match="'tenants' list"):
        (tmp_path / "bad.yaml").write_text("- 1\n")
        load_tenants_file(tmp_path / "bad.yaml")


def test_cli_builds_config_from_flags_and_env():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--engine-url", "http://a:1", "--engine-url", "http://b:2", "--tenants", str(EXAMPLE)])
    config = build_config(args, {"REDIS_URL": "redis://r:6379/3", "MOE_SERVE_ADMIN_KEY": "adm"})
    assert config.engine.urls == ("http://a:1", "http://b:2")
    assert config.limits.redis_url == "redis://r:6379/3"
    assert config.admin_key_hash == hash_key("adm")
    assert len(config.tenants) == 2
    assert build_config(args, {}).limits.redis_url is None  # in-process limits by default


def test_gateway_subcommand_is_registered():
    args = build_parser().parse_args(["gateway", "--engine-url", "http://a:1", "--tenants", str(EXAMPLE)])
    assert args._module.__name__ == "service.gateway.cli"
