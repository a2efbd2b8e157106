"""The gateway's real /metrics exports every `moe_serve:` name the dashboards and rules read.

The gateway runs in-process (uvicorn on 127.0.0.1) in front of the gateway tests' SGLang engine TEST DOUBLE, and gets
the traffic that creates its labelled series: answered, streamed, refused (401, 429) and client-aborted requests.
"""

from __future__ import annotations

import time

import httpx
import pytest

pytest.importorskip("service.gateway.app", reason="the gateway (issue 5) is not on this branch yet")

from service.gateway.app import create_app  # noqa: E402
from tests.deploy import metric_names  # noqa: E402
from tests.deploy.exposition import exported_names, sampled_names  # noqa: E402
from tests.gateway.conftest import KEY, OTHER_KEY, gateway_config  # noqa: E402
from tests.gateway.engine_double import Record, Script, create_engine_double  # noqa: E402
from tests.gateway.servers import serve  # noqa: E402


def _traffic(gateway: str, script: Script) -> None:
    acme = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "tiny-moe", "prompt": "one two three", "max_tokens": 4}
    assert httpx.post(f"{gateway}/v1/completions", json=body, headers=acme).status_code == 200
    with httpx.stream("POST", f"{gateway}/v1/completions", json=body | {"stream": True}, headers=acme) as response:
        assert response.status_code == 200
        response.read()
    assert httpx.post(f"{gateway}/v1/completions", json=body).status_code == 401
    slow = {"Authorization": f"Bearer {OTHER_KEY}"}  # 2 requests per minute
    statuses = [httpx.post(f"{gateway}/v1/completions", json=body, headers=slow).status_code for _ in range(3)]
    assert statuses[-1] == 429
    script.token_delay_s = 0.05  # a long stream the client leaves after its first chunk
    long_body = body | {"stream": True, "max_tokens": 40}
    with httpx.stream("POST", f"{gateway}/v1/completions", json=long_body, headers=acme) as response:
        next(response.iter_lines())


@pytest.fixture(scope="module")
def scraped() -> str:
    script, record = Script(), Record()
    with (
        serve(create_engine_double(script, record)) as engine_url,
        serve(create_app(gateway_config((engine_url,)))) as gw,
    ):
        _traffic(gw, script)
        deadline = time.monotonic() + 5
        while not record.disconnects and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # the gateway counts the abort after the engine saw the disconnect
        return httpx.get(f"{gw}/metrics").text


def test_every_listed_gateway_name_is_exported(scraped):
    missing = metric_names.GATEWAY - exported_names(scraped)
    assert not missing, f"dashboards/rules read gateway series that /metrics does not export: {sorted(missing)}"


def test_traffic_gave_every_listed_gateway_name_a_sample(scraped):
    # Declared-but-empty would also pass the test above; samples show the label sets the dashboards group by exist.
    missing = metric_names.GATEWAY - sampled_names(scraped)
    assert not missing, f"no samples after traffic for: {sorted(missing)}"


def test_names_outside_the_list_are_rejected(scraped):
    # guards the check itself: a misspelt name is not exported
    assert "moe_serve:request_total" not in exported_names(scraped)
    assert "moe_serve:requests_total" in exported_names(scraped)
