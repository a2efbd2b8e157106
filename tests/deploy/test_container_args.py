"""The commands the chart and compose give the containers parse with moe-serve's own CLI (`moe-serve engine|gateway`),
so a renamed or removed flag fails here rather than in a crash-looping pod."""

from __future__ import annotations

import pytest

from service.cli import COMMANDS, build_parser
from tests.deploy.chart import RELEASE, container, gpu_values, manifests
from tests.deploy.compose import compose_services


def _parse(args: list[str]):
    if args[0] not in COMMANDS:
        pytest.skip(f"`moe-serve {args[0]}` is not on this branch yet (gateway: issue 5)")
    return build_parser().parse_args(args)


@pytest.mark.parametrize("values", [None, "production"], ids=["default", "production"])
@pytest.mark.parametrize("component", ["engine", "gateway"])
def test_chart_container_args_parse(values, component):
    objects = manifests(gpu_values() if values else None)
    args = container(objects, f"{RELEASE}-moe-serve-{component}")["args"]
    parsed = _parse(args)
    assert parsed.host == "0.0.0.0"
    if component == "engine":
        assert "--enable-metrics" in parsed.sglang_args


@pytest.mark.parametrize("service", ["engine", "engine-gpu", "gateway"])
def test_compose_commands_parse(service):
    command = compose_services()[service]["command"]
    parsed = _parse(command)
    assert parsed.host == "0.0.0.0"
