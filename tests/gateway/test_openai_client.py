"""The official `openai` client, sync and streaming, completions and chat, against the gateway (issue 5)."""

from __future__ import annotations

import openai
import pytest

from tests.gateway.conftest import KEY


@pytest.fixture
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key=KEY, max_retries=0)


def test_completion(client, fresh_engine):
    out = client.completions.create(model="tiny-moe", prompt="hello there", max_tokens=3, temperature=0.0)
    assert out.choices[0].text == " t0 t1 t2"
    assert out.usage.prompt_tokens == 2 and out.usage.completion_tokens == 3
    sent = fresh_engine[1].requests[-1]
    assert sent["max_tokens"] == 3 and sent["temperature"] == 0.0 and sent["prompt"] == "hello there"


def test_completion_stream_with_usage(client):
    stream = client.completions.create(
        model="tiny-moe", prompt="hi", max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == " t0 t1 t2 t3"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4


def test_completion_stream_without_usage_hides_it(client):
    chunks = list(client.completions.create(model="tiny-moe", prompt="hi", max_tokens=2, stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_chat(client):
    out = client.chat.completions.create(
        model="tiny-moe", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=2
    )
    assert out.choices[0].message.content == " t0 t1"
    assert out.choices[0].message.role == "assistant"


def test_chat_stream(client):
    stream = client.chat.completions.create(
        model="tiny-moe", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == " t0 t1 t2"


def test_models(client):
    assert [m.id for m in client.models.list()] == ["tiny-moe"]


def test_sampling_fields_and_hints_reach_engine(client, fresh_engine):
    client.completions.create(
        model="tiny-moe",
        prompt="x",
        max_tokens=2,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        stop=["\n"],
        extra_body={"top_k": 5, "min_p": 0.1, "ignore_eos": True, "custom_params": {"evil": 1}, "priority": 99},
    )
    sent = fresh_engine[1].requests[-1]
    assert {k: sent[k] for k in ("temperature", "top_p", "seed", "stop", "top_k", "min_p", "ignore_eos")} == {
        "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\n"], "top_k": 5, "min_p": 0.1, "ignore_eos": True
    }  # fmt: skip
    # Tenants cannot set engine-only fields: the gateway's values replace theirs.
    assert sent["priority"] == 7
    assert sent["custom_params"] == {
        "moe_serve": {
            "tenant": "acme",
            "slo_class": "interactive",
            "ttft_ms": 300.0,
            "tpot_ms": 50.0,
            "policy": "moe_serve",
            "allow_lossy_budget": True,
            "priority": 7,
        }
    }
    assert sent["rid"].startswith("moe-")
