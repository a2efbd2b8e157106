"""OpenAI-compatible endpoints of the CPU SGLang server (with NGRAM speculation): completions and chat, streamed and
not; bad requests get a 4xx and leave the server healthy."""

import json

import httpx
import pytest

from tests.engine import engine_config

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module")
def url(tiny_models, engine_pool):
    return engine_pool.url(engine_config(tiny_models["mixtral-echo"], algorithm="ngram", topk=1, num_draft_tokens=4))


def sse_events(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]


def test_completions(url):
    r = httpx.post(
        f"{url}/v1/completions",
        json={"model": "m", "prompt": "def add(a, b):", "max_tokens": 8, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] == 8 and body["choices"][0]["text"]


def test_completions_stream(url):
    # greedy: a sampled 6-token completion of the tiny test model can be all end-of-text (no text to check)
    payload = {"model": "m", "prompt": "for i in range(10):", "max_tokens": 6, "stream": True, "temperature": 0}
    with httpx.stream("POST", f"{url}/v1/completions", json=payload, timeout=120) as r:
        assert r.status_code == 200
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
    assert text


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions(url, stream):
    payload = {"model": "m", "messages": [{"role": "user", "content": "12 + 30 ="}], "max_tokens": 6, "stream": stream}
    if not stream:
        r = httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=120)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        return
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=payload, timeout=120) as r:
        assert r.status_code == 200
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert any(json.loads(e)["choices"] and json.loads(e)["choices"][0]["delta"] for e in events[:-1])


BAD_REQUESTS = {
    "not json": dict(content=b"{not json", headers={"content-type": "application/json"}),
    "no prompt": dict(json={"model": "m", "max_tokens": 4}),
    "negative max_tokens": dict(json={"model": "m", "prompt": "x", "max_tokens": -3}),
    "temperature not a number": dict(json={"model": "m", "prompt": "x", "temperature": "hot"}),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_4xx_and_server_survives(url, case):
    r = httpx.post(f"{url}/v1/completions", timeout=60, **BAD_REQUESTS[case])
    assert 400 <= r.status_code < 500, f"{case}: {r.status_code} {r.text[:200]}"
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
