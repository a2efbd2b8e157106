"""schemathesis fuzzes the gateway's own OpenAPI: no input may produce a 5xx, and every 4xx is in the OpenAI error
shape. The whole API with valid data, then the chat endpoint and the admin API also with invalid data (negative
mode: wrong types, missing fields, out-of-range values).

The engine behind it is the SGLang TEST DOUBLE, reached in-process through httpx's ASGI transport. Examples are
bounded so the whole tests/gateway run stays short.
"""

from __future__ import annotations

import httpx
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

from service.gateway.app import create_app
from tests.gateway.conftest import ADMIN_KEY, KEY, gateway_config
from tests.gateway.engine_double import create_engine_double

FAST = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


def gateway_schema():
    double = httpx.ASGITransport(app=create_engine_double())
    app = create_app(gateway_config(("http://engine-double",)), engine_transport=double)
    # The API description is served to key holders only (no endpoint but /health, /ready, /metrics is public).
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers={"Authorization": f"Bearer {ADMIN_KEY}"})


# Built at collection: schemathesis's from_fixture does not work with pytest 9. Building touches no network.
schema = gateway_schema()
edges = gateway_schema().include(path_regex=r"^/(v1/chat/completions|admin/)")
edges.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


def openai_shaped_error(ctx, response, case):
    """A 4xx the gateway answers carries {"error": {"message", "type", "param", "code"}}."""
    if 400 <= response.status_code < 500:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"]


def call(case):
    key = ADMIN_KEY if case.path.startswith("/admin") else KEY
    case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=[not_a_server_error])
    response = case.call(headers={"Authorization": f"Bearer {key}"})
    openai_shaped_error(None, response, case)


@schema.parametrize()
@FAST
def test_no_server_errors(case):
    call(case)


@edges.parametrize()
@settings(FAST, max_examples=20)
def test_chat_and_admin_with_invalid_data(case):
    call(case)
