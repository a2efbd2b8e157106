"""Everything one gateway instance holds at run time, built by `create_app` and reached through `request.app.state`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.gateway.config import GatewayConfig
from service.gateway.engine_client import EngineClient
from service.gateway.limits import RateLimiter
from service.gateway.metrics import GatewayMetrics
from service.gateway.overload import InFlight
from service.gateway.tenants import TenantRegistry


@dataclass
class GatewayState:
    config: GatewayConfig  # the frozen config tree
    tenants: TenantRegistry  # live tenants (admin router mutates)
    limiter: RateLimiter  # Redis or in-process token buckets
    engine: EngineClient  # SGLang replicas
    metrics: GatewayMetrics  # this instance's Prometheus registry
    in_flight: InFlight  # outstanding requests/tokens against the replica pool and tenant bounds
    clock: Callable[[], float]  # seconds since the epoch; injected so tests can pin rate-limit windows

    def served_models(self) -> tuple[str, ...]:
        return self.config.models or self.engine.models

    def now_ms(self) -> int:
        return int(self.clock() * 1000)
