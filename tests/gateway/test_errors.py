"""Every error status of issue 5 in the OpenAI shape, and that unauthenticated requests never reach the engine."""

from __future__ import annotations

import httpx
import pytest

from service.gateway.app import create_app
from tests.gateway.conftest import KEY, OTHER_KEY, gateway_config
from tests.gateway.servers import serve

AUTH = {"Authorization": f"Bearer {KEY}"}
COMPLETION = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 2}


def assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer sk-wrong"}, "invalid_api_key"),
        ({"Authorization": "Basic x"}, "missing_api_key"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_401_never_reaches_engine(gateway, fresh_engine, headers, code, path):
    body = (
        COMPLETION
        if path == "/v1/completions"
        else {"model": "tiny-moe", "messages": [{"role": "user", "content": "x"}]}
    )
    error = assert_openai_error(httpx.post(gateway + path, json=body, headers=headers), 401, code)
    assert error["type"] == "authentication_error"
    assert fresh_engine[1].requests == []


def test_401_before_body_validation(gateway, fresh_engine):
    # A bad key with a bad body is still 401: nothing about the body is revealed to an unauthenticated caller.
    response = httpx.post(gateway + "/v1/completions", json={"prompt": 3}, headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert fresh_engine[1].requests == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "hi"}, "model"),
        ({"model": "tiny-moe"}, "prompt"),
        ({"model": "tiny-moe", "prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"model": "tiny-moe", "prompt": "hi", "temperature": 9}, "temperature"),
        ({"model": "tiny-moe", "prompt": "hi", "n": 0}, "n"),
        ({"model": "tiny-moe", "prompt": [-1]}, "prompt"),
    ],
)
def test_400_invalid_body(gateway, fresh_engine, body, param):
    error = assert_openai_error(
        httpx.post(gateway + "/v1/completions", json=body, headers=AUTH), 400, "invalid_request"
    )
    assert error["param"].startswith(param)
    assert fresh_engine[1].requests == []


def test_400_not_json(gateway):
    response = httpx.post(
        gateway + "/v1/completions", content=b"{not json", headers={**AUTH, "content-type": "application/json"}
    )
    assert_openai_error(response, 400)


def test_404_unknown_model(gateway, fresh_engine):
    error = assert_openai_error(
        httpx.post(gateway + "/v1/completions", json={**COMPLETION, "model": "gpt-9"}, headers=AUTH),
        404,
        "model_not_found",
    )
    assert error["param"] == "model"
    assert fresh_engine[1].requests == []


def test_404_unknown_route(gateway):
    assert_openai_error(httpx.get(gateway + "/v1/nothing", headers=AUTH), 404)


def test_413_prompt_estimate(gateway, fresh_engine):
    long_prompt = "word " * 1200  # 6000 bytes ~ 1500 estimated tokens > max_prompt_tokens=1000
    assert_openai_error(
        httpx.post(gateway + "/v1/completions", json={**COMPLETION, "prompt": long_prompt}, headers=AUTH),
        413,
        "context_length_exceeded",
    )
    assert fresh_engine[1].requests == []


def test_413_body_too_large(gateway, fresh_engine):
    huge = "x" * (70 * 1024)
    assert_openai_error(httpx.post(gateway + "/v1/completions", json={**COMPLETION, "prompt": huge}, headers=AUTH), 413)
    assert fresh_engine[1].requests == []


def test_413_engine_context_length(gateway, fresh_engine):
    prompt = "a " * 100  # 200 bytes passes the gateway estimate, 100 words exceed the double's 64-token context
    response = httpx.post(
        gateway + "/v1/completions", json={**COMPLETION, "prompt": prompt, "stream": True}, headers=AUTH
    )
    assert_openai_error(response, 413, "context_length_exceeded")


def test_429_requests_with_headers(gateway):
    slow = {"Authorization": f"Bearer {OTHER_KEY}"}  # tenant "slow": 2 RPM, 1000 TPM
    ok = [httpx.post(gateway + "/v1/completions", json=COMPLETION, headers=slow) for _ in range(2)]
    assert [r.status_code for r in ok] == [200, 200]
    assert ok[0].headers["x-ratelimit-remaining-requests"] == "1"
    refused = httpx.post(gateway + "/v1/completions", json=COMPLETION, headers=slow)
    error = assert_openai_error(refused, 429, "rate_limit_requests")
    assert error["type"] == "rate_limit_error"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-remaining-tokens" in refused.headers


def test_429_tokens(gateway):
    slow = {"Authorization": f"Bearer {OTHER_KEY}"}
    # Tenant "slow" has 1000 TPM; "hi" is estimated at 1 token, so this reserves (and then uses) 500.
    first = httpx.post(gateway + "/v1/completions", json={**COMPLETION, "max_tokens": 499}, headers=slow)
    assert first.status_code == 200
    refused = httpx.post(gateway + "/v1/completions", json={**COMPLETION, "max_tokens": 599}, headers=slow)
    assert_openai_error(refused, 429, "rate_limit_tokens")
    assert 500 <= int(refused.headers["x-ratelimit-remaining-tokens"]) < 600
    assert refused.headers["x-ratelimit-remaining-requests"] == "1"
    assert int(refused.headers["retry-after"]) >= 1


def test_429_request_larger_than_limit(gateway):
    slow = {"Authorization": f"Bearer {OTHER_KEY}"}
    refused = httpx.post(gateway + "/v1/completions", json={**COMPLETION, "max_tokens": 5000}, headers=slow)
    assert_openai_error(refused, 429, "tokens_exceed_limit")


def test_503_engine_down(fresh_engine):
    with serve(create_app(gateway_config(("http://127.0.0.1:9",)))) as url:  # port 9: nothing listens
        response = httpx.post(url + "/v1/completions", json=COMPLETION, headers=AUTH)
        error = assert_openai_error(response, 503, "engine_unavailable")
        assert error["type"] == "service_unavailable"
        assert_openai_error(httpx.get(url + "/ready"), 503)


@pytest.mark.parametrize("stream", [False, True])
def test_503_engine_failing(gateway, fresh_engine, stream):
    fresh_engine[0].fail_status = 503
    response = httpx.post(gateway + "/v1/completions", json={**COMPLETION, "stream": stream}, headers=AUTH)
    assert_openai_error(response, 503, "engine_unavailable")
