"""`moe-serve gateway`: serve the OpenAI-compatible front in front of one or more SGLang servers.

Config is built here, at the edge (flags, then env: REDIS_URL, MOE_SERVE_ADMIN_KEY), and passed down frozen.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from service.gateway.body_limit import EdgeConfig
from service.gateway.config import EngineConfig, GatewayConfig, LimitsConfig
from service.gateway.limits_outage import MODES, OutageConfig
from service.gateway.overload import OverloadConfig
from service.gateway.tenants import hash_key, load_tenants_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine-url", action="append", required=True, help="SGLang server base URL (repeat for replicas)"
    )
    parser.add_argument("--tenants", required=True, help="tenants YAML file (see deploy/tenants.example.yaml)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", action="append", default=[], help="model name served (default: what engines list)")
    parser.add_argument("--redis-url", default=None, help="shared limits store (default: $REDIS_URL, else in-process)")
    parser.add_argument("--redis-key-prefix", default="moe_serve:rl")
    parser.add_argument("--admin-key-sha256", default=None, help="admin key digest (or set $MOE_SERVE_ADMIN_KEY)")
    parser.add_argument("--max-prompt-tokens", type=int, default=32768)
    parser.add_argument("--default-max-tokens", type=int, default=256, help="tokens charged when a request sets none")
    parser.add_argument("--health-interval", type=float, default=5.0, help="seconds between engine health probes")
    parser.add_argument("--no-forward-priority", action="store_true", help="do not send tenant priority to SGLang")
    parser.add_argument("--log-level", default="info")
    outage = parser.add_argument_group("Redis outage (limits_outage.py)")
    outage.add_argument("--limits-outage", choices=MODES, default="open", help="while Redis is down: in-process "
                        "limits for --fail-open-s seconds (open), or 503 (closed)")  # fmt: skip
    outage.add_argument("--fail-open-s", type=float, default=30.0, help="seconds per outage the local limits stand in")
    outage.add_argument("--local-share", type=float, default=1.0, help="share of each tenant's limits one gateway "
                        "admits alone during an outage (1/N with N gateways)")  # fmt: skip
    outage.add_argument("--redis-timeout", type=float, default=1.0, help="seconds before a Redis call counts as down")
    edges = parser.add_argument_group("client input bounds (body_limit.py, server.py)")
    edges.add_argument("--body-timeout", type=float, default=30.0, help="seconds to receive a request body (408)")
    edges.add_argument("--header-timeout", type=float, default=10.0, help="seconds to receive request headers (408)")
    edges.add_argument("--max-json-depth", type=int, default=64, help="nesting levels of a JSON body (400)")
    bounds = parser.add_argument_group("overload admission (overload.py)")
    bounds.add_argument("--queue-factor", type=float, default=2.0, help="outstanding work per replica, in multiples of "
                        "the engine's max_running_requests / KV tokens")  # fmt: skip
    bounds.add_argument("--replica-requests", type=int, default=None, help="outstanding requests per replica (fixed)")
    bounds.add_argument("--replica-tokens", type=int, default=None, help="outstanding tokens per replica (fixed)")
    bounds.add_argument("--lowest-priority-fill", type=float, default=0.8, help="pool share the lowest priority fills")
    bounds.add_argument("--tenant-requests", type=int, default=None, help="default outstanding requests per tenant")
    bounds.add_argument("--tenant-tokens", type=int, default=None, help="default outstanding tokens per tenant")


def build_config(args: argparse.Namespace, env: Mapping[str, str]) -> GatewayConfig:
    admin_hash = args.admin_key_sha256
    if admin_hash is None and env.get("MOE_SERVE_ADMIN_KEY"):
        admin_hash = hash_key(env["MOE_SERVE_ADMIN_KEY"])
    return GatewayConfig(
        engine=EngineConfig(
            urls=tuple(args.engine_url),
            health_interval_s=args.health_interval,
            forward_priority=not args.no_forward_priority,
        ),
        tenants=load_tenants_file(args.tenants),
        admin_key_hash=admin_hash,
        limits=LimitsConfig(
            redis_url=args.redis_url or env.get("REDIS_URL") or None,
            key_prefix=args.redis_key_prefix,
            outage=OutageConfig(
                mode=args.limits_outage,
                fail_open_s=args.fail_open_s,
                local_share=args.local_share,
                timeout_s=args.redis_timeout,
            ),
        ),
        edges=EdgeConfig(
            body_timeout_s=args.body_timeout, header_timeout_s=args.header_timeout, max_json_depth=args.max_json_depth
        ),
        overload=OverloadConfig(
            queue_factor=args.queue_factor,
            replica_requests=args.replica_requests,
            replica_tokens=args.replica_tokens,
            lowest_priority_fill=args.lowest_priority_fill,
            tenant_requests=args.tenant_requests,
            tenant_tokens=args.tenant_tokens,
        ),
        models=tuple(args.model),
        max_prompt_tokens=args.max_prompt_tokens,
        default_max_tokens=args.default_max_tokens,
    )


def run(args: argparse.Namespace) -> int:
    from service.gateway.app import create_app
    from service.gateway.server import run as serve

    config = build_config(args, os.environ)
    serve(create_app(config), args.host, args.port, config.edges, args.log_level)
    return 0
