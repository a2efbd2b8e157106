"""Fixtures: the SGLang engine TEST DOUBLE and a gateway in front of it, both served by uvicorn on 127.0.0.1."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.gateway.app import create_app
from service.gateway.config import EngineConfig, GatewayConfig
from service.gateway.limits import InProcessLimiter
from service.gateway.metrics import GatewayMetrics
from service.gateway.tenants import SloClass, Tenant, TenantRegistry, hash_key
from tests.gateway.engine_double import Record, Script, create_engine_double
from tests.gateway.servers import serve

KEY = "sk-acme-test"
OTHER_KEY = "sk-slow-test"
ADMIN_KEY = "sk-admin-test"

ACME = Tenant(
    name="acme",
    key_hashes=(hash_key(KEY),),
    rpm=10_000,
    tpm=10_000_000,
    priority=7,
    slo=SloClass("interactive", 300.0, 50.0),
    policy="moe_serve",
    allow_lossy_budget=True,
)
SLOW = Tenant(name="slow", key_hashes=(hash_key(OTHER_KEY),), rpm=2, tpm=1000)


def real_engine_gateway_config(engine_url: str) -> GatewayConfig:
    """For tests against a real SGLang server: its own model list and the default (production) engine timeouts,
    since a CPU engine on a loaded CI machine can take seconds per token."""
    return gateway_config((engine_url,), engine=EngineConfig(urls=(engine_url,)), models=(), max_prompt_tokens=32768)


def gateway_config(engine_urls: tuple[str, ...], **overrides) -> GatewayConfig:
    config = GatewayConfig(
        engine=EngineConfig(urls=engine_urls, health_interval_s=0.2, connect_timeout_s=1.0, read_timeout_s=10.0),
        tenants=(ACME, SLOW),
        admin_key_hash=hash_key(ADMIN_KEY),
        models=("tiny-moe",),
        max_prompt_tokens=1000,
        max_body_bytes=64 * 1024,
    )
    return replace(config, **overrides)


@pytest.fixture(scope="module")
def engine():
    """(script, record, url) of one engine double, shared by a module; tests reset the record they read."""
    script, record = Script(), Record()
    with serve(create_engine_double(script, record)) as url:
        yield script, record, url


@pytest.fixture
def fresh_engine(engine):
    script, record, url = engine
    for name, value in vars(Script()).items():
        setattr(script, name, value)
    for name in vars(record):
        getattr(record, name).clear()
    return script, record, url


@pytest.fixture(scope="module")
def served_gateway(engine):
    """(app, base URL) of one gateway per module; `gateway` resets its state for each test."""
    app = create_app(gateway_config((engine[2],)))
    with serve(app) as url:
        yield app, url


@pytest.fixture
def gateway(served_gateway, fresh_engine):
    """Base URL of a gateway (in-process limits) in front of the engine double, with fresh tenants, limits, metrics."""
    app, url = served_gateway
    state = app.state.gateway
    state.tenants = TenantRegistry(state.config.tenants)
    state.limiter = InProcessLimiter()
    state.metrics = GatewayMetrics(state.engine.stats)
    for replica in state.engine.replicas:
        replica.down_until = 0.0
    return url
