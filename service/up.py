"""`moe-serve up`: the embedded default on one machine — an SGLang engine (bundled model; CPU unless a GPU is
present) and the gateway in front of it, answering the OpenAI API on one port. Ctrl-C stops both."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from moe_sglang.cli import add_engine_arguments, engine_config

EXAMPLE_TENANTS = Path(__file__).resolve().parent.parent / "deploy" / "tenants.example.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_engine_arguments(parser)
    parser.set_defaults(port=30000)
    parser.add_argument("--gateway-host", default="127.0.0.1")
    parser.add_argument("--gateway-port", type=int, default=8000)
    parser.add_argument("--tenants", default=str(EXAMPLE_TENANTS), help="tenants YAML (default: the example tenants)")
    parser.add_argument("--redis-url", default=None, help="limits store (default: $REDIS_URL, else in-process)")
    parser.add_argument("--engine-start-timeout", type=float, default=900.0, help="seconds")


def run(args: argparse.Namespace) -> int:
    from moe_sglang.server import running_engine
    from service.gateway.app import create_app
    from service.gateway.config import EngineConfig, GatewayConfig, LimitsConfig
    from service.gateway.server import run as serve
    from service.gateway.tenants import load_tenants_file

    # SIGTERM (docker stop, kill) must unwind the `with` below so the engine's process group is stopped too; uvicorn
    # installs its own handlers while it serves and restores this one after.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    engine = engine_config(args)
    print(f"moe-serve: starting the SGLang engine on {engine.host}:{engine.port} ({engine.model_path})", flush=True)
    with running_engine(engine, timeout=args.engine_start_timeout) as engine_url:
        config = GatewayConfig(
            engine=EngineConfig(urls=(engine_url,)),
            tenants=load_tenants_file(args.tenants),
            limits=LimitsConfig(redis_url=args.redis_url or os.environ.get("REDIS_URL") or None),
        )
        print(
            f"moe-serve: gateway on http://{args.gateway_host}:{args.gateway_port}/v1 (engine {engine_url})", flush=True
        )
        serve(create_app(config), args.gateway_host, args.gateway_port, config.edges)
    return 0
