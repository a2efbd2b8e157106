"""What an OpenAI / vLLM user does, with the official openai SDK, through the gateway, on the real CPU engine serving
the bundled model with NGRAM speculation: completions and chat (sync and streamed), logprobs equal to the target
model's (checked against an engine without speculation), per-request speculation control (`extra_body`) and its
refusals, and the per-request speculation stats.

Greedy everywhere (text is compared, never asserted), `ignore_eos` where a test needs tokens to compare: the bundled
model may end a chat turn at once."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from service.gateway.tenants import Tenant, hash_key
from tests.engine import engine_config
from tests.gateway.conftest import ACME, KEY, real_engine_gateway_config
from tests.gateway.servers import serve
from tests.models.test_assets import TARGET

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

MODEL = "moe-tiny"
CODE = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\ndef "
BOUNDED_KEY = "sk-sdk-bounded"
BOUNDED = Tenant(
    name="bounded",
    key_hashes=(hash_key(BOUNDED_KEY),),
    rpm=10_000,
    tpm=10_000_000,
    policy="moe-serve",
    allowed_policies=("static", "sglang"),
    max_k=3,
)
GREEDY = {"temperature": 0.0}
LOGPROB_ATOL = 1e-4  # nats: fp32 verify forward (4 tokens per request) vs one-token decode forward


@pytest.fixture(scope="module")
def urls(engine_pool):
    """(gateway URL in front of the NGRAM engine, URL of an engine without speculation)."""
    from service.gateway.app import create_app

    spec = engine_pool.url(engine_config(TARGET, algorithm="ngram", topk=1, num_draft_tokens=4))
    plain = engine_pool.url(engine_config(TARGET))
    with serve(create_app(replace(real_engine_gateway_config(spec), tenants=(ACME, BOUNDED)))) as gateway:
        yield gateway, plain


def client(url: str, key: str = KEY):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)


def spec_stats(response) -> dict:
    return response.model_extra["metrics"]["speculative_decoding"]


def test_completion_sync_and_stream(urls):
    sdk = client(urls[0])
    done = sdk.completions.create(model=MODEL, prompt=CODE, max_tokens=12, extra_body={"ignore_eos": True}, **GREEDY)
    assert done.usage.completion_tokens == 12 and done.choices[0].finish_reason == "length"
    assert "metrics" not in done.model_extra  # stats only when asked
    stream = sdk.completions.create(
        model=MODEL, prompt=CODE, max_tokens=12, stream=True, extra_body={"ignore_eos": True}, **GREEDY
    )
    assert "".join(c.choices[0].text for c in stream if c.choices) == done.choices[0].text


def test_chat_sync_and_stream_with_the_bundled_template(urls):
    sdk = client(urls[0])
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 12 + 30?"}]
    done = sdk.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, extra_body={"ignore_eos": True}, **GREEDY
    )
    assert done.choices[0].message.role == "assistant" and done.usage.completion_tokens == 8
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
        **GREEDY,
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == done.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 8


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, abs_tol=LOGPROB_ATOL)


def test_completion_logprobs_are_the_target_models_while_speculating(urls):
    gateway, plain = urls
    asked = dict(model=MODEL, prompt=CODE, max_tokens=16, logprobs=3, **GREEDY)
    # static K (a tenant allowed it): the moe-serve policy may rightly decide not to speculate here (its learnt prior)
    speculation = {"policy": "static", "stats": True}
    spec = client(gateway, BOUNDED_KEY).completions.create(
        **asked, extra_body={"ignore_eos": True, "speculation": speculation}
    )
    reference = client(plain).completions.create(**asked, extra_body={"ignore_eos": True})
    got, want = spec.choices[0].logprobs, reference.choices[0].logprobs
    assert got.tokens == want.tokens and len(got.tokens) == 16
    assert all(_close(a, b) for a, b in zip(got.token_logprobs, want.token_logprobs, strict=True))
    for g, w in zip(got.top_logprobs, want.top_logprobs, strict=True):
        assert len(g) == 3 and g.keys() == w.keys() and all(_close(g[t], w[t]) for t in g)
    assert got.text_offset == [sum(len(t) for t in got.tokens[:i]) for i in range(16)]
    stats = spec_stats(spec)
    assert stats["num_spec_steps"] > 0 and stats["num_accepted_draft_tokens"] > 0  # it did speculate, and gain


def test_chat_logprobs_streamed_are_the_target_models(urls):
    gateway, plain = urls
    asked = dict(
        model=MODEL,
        messages=[{"role": "user", "content": CODE}],
        max_tokens=10,
        logprobs=True,
        top_logprobs=2,
        extra_body={"ignore_eos": True},
        **GREEDY,
    )
    stream = client(gateway).chat.completions.create(**asked, stream=True)
    got = [item for c in stream if c.choices and c.choices[0].logprobs for item in c.choices[0].logprobs.content]
    want = client(plain).chat.completions.create(**asked).choices[0].logprobs.content
    assert [g.token for g in got] == [w.token for w in want] and len(got) == 10
    assert all(_close(g.logprob, w.logprob) for g, w in zip(got, want, strict=True))
    for g, w in zip(got, want, strict=True):
        assert [t.token for t in g.top_logprobs] == [t.token for t in w.top_logprobs]


def test_speculation_off_for_one_request_changes_nothing_but_the_steps(urls):
    sdk = client(urls[0], BOUNDED_KEY)
    asked = dict(model=MODEL, prompt=CODE, max_tokens=16, **GREEDY)
    off = sdk.completions.create(**asked, extra_body={"ignore_eos": True, "speculation": {"max_k": 0, "stats": True}})
    on = sdk.completions.create(
        **asked, extra_body={"ignore_eos": True, "speculation": {"policy": "static", "stats": True}}
    )
    assert off.choices[0].text == on.choices[0].text
    off_stats, on_stats = spec_stats(off), spec_stats(on)
    assert off_stats["policy"] == "moe-serve" and off_stats["num_spec_steps"] == 0
    assert off_stats["k_chosen_histogram"] == [15] and off_stats["num_steps_k0"] == 15  # every step after the first
    assert on_stats["policy"] == "static" and on_stats["num_spec_tokens"] <= 3 and on_stats["num_spec_steps"] > 0
    assert sum(on_stats["acceptance_histogram"]) == on_stats["num_spec_steps"]


def test_streamed_stats_arrive_in_the_final_usage_chunk(urls):
    stream = client(urls[0], BOUNDED_KEY).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": CODE}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True, "speculation": {"policy": "sglang", "stats": True}},
        **GREEDY,
    )
    last = list(stream)[-1]
    assert last.choices == [] and last.usage.completion_tokens == 6
    stats = spec_stats(last)
    assert stats["policy"] == "sglang" and stats["num_decode_steps"] >= 1


@pytest.mark.parametrize(
    ("extra", "error", "param"),
    [
        ({"speculation": {"policy": "adaspec"}}, "PermissionDeniedError", "speculation.policy"),
        ({"speculation": {"max_k": 4}}, "PermissionDeniedError", "speculation.max_k"),
        ({"speculation": {"expert_budget": 2}}, "PermissionDeniedError", "speculation.expert_budget"),
        ({"speculation": {"policy": "fastest"}}, "BadRequestError", "speculation.policy"),
        ({"logit_bias": {"5": 3}}, "BadRequestError", "logit_bias"),
    ],
)
def test_refusals_reach_the_sdk_as_openai_errors(urls, extra, error, param):
    import openai

    with pytest.raises(getattr(openai, error)) as raised:
        client(urls[0], BOUNDED_KEY).completions.create(model=MODEL, prompt="x", max_tokens=2, extra_body=extra)
    assert raised.value.param == param


def test_bad_key_is_refused_with_openai_error(urls):
    import openai

    with pytest.raises(openai.AuthenticationError):
        client(urls[0], key="sk-wrong").completions.create(model=MODEL, prompt="x", max_tokens=2)
