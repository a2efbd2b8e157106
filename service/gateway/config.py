"""The gateway's one frozen config tree, built at the edge (CLI/env/YAML) and passed to `create_app(config)`."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.gateway.body_limit import EdgeConfig
from service.gateway.limits_outage import OutageConfig
from service.gateway.overload import OverloadConfig
from service.gateway.tenants import Tenant


@dataclass(frozen=True)
class EngineConfig:
    urls: tuple[str, ...]  # base URLs of SGLang HTTP servers, e.g. ("http://127.0.0.1:30000",)
    connect_timeout_s: float = 5.0  # seconds to open a connection to a replica
    read_timeout_s: float = 600.0  # seconds without a byte from the engine before giving up
    health_interval_s: float = 5.0  # seconds between /health probes of each replica
    health_timeout_s: float = 10.0  # seconds a /health probe may take
    slow_probes_before_unhealthy: int = 2  # consecutive timed-out probes that mark a replica unhealthy
    failure_cooldown_s: float = 5.0  # seconds a replica is skipped after failing requests before any token
    failures_before_cooldown: int = 2  # consecutive such failures that start the cooldown: one alone (a connection
    # the engine was closing, a connect timeout of a starved engine) moves that request on but keeps the replica in
    forward_priority: bool = True  # send the tenant's priority as SGLang's `priority` (ignored unless the engine
    # runs --enable-priority-scheduling; a server with --abort-on-priority-when-disabled needs this off)


@dataclass(frozen=True)
class LimitsConfig:
    redis_url: str | None = None  # REDIS_URL; None = in-process store (single-node embedded default)
    key_prefix: str = "moe_serve:rl"  # Redis key prefix, so several deployments can share one Redis
    bytes_per_token: float = 4.0  # bytes of prompt text per token, for the pre-admission token estimate
    outage: OutageConfig = field(default_factory=OutageConfig)  # what happens while Redis is down (limits_outage.py)


@dataclass(frozen=True)
class GatewayConfig:
    engine: EngineConfig
    tenants: tuple[Tenant, ...] = ()  # initial tenants (usually from a YAML file)
    admin_key_hash: str | None = None  # SHA-256 hex of the admin key; None disables /admin
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    models: tuple[str, ...] = ()  # model names served; empty = whatever the engines list at /v1/models
    max_prompt_tokens: int = 32768  # tokens (estimated); a longer prompt gets 413 before reaching the engine
    max_body_bytes: int = 4 * 1024 * 1024  # bytes; a larger request body gets 413
    default_max_tokens: int = 256  # tokens charged against TPM when a request names no max_tokens
    overload: OverloadConfig = field(default_factory=OverloadConfig)  # outstanding-work bounds (overload.py)
    edges: EdgeConfig = field(default_factory=EdgeConfig)  # time and size bounds on what clients send (body_limit.py)
