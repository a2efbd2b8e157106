"""End to end: the official openai client → the moe-serve gateway → a real SGLang CPU engine with speculation."""

import pytest

from tests.engine import engine_config
from tests.gateway.conftest import KEY, real_engine_gateway_config
from tests.gateway.servers import serve

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module")
def gateway_url(tiny_models, engine_pool):
    from service.gateway.app import create_app

    engine_url = engine_pool.url(
        engine_config(tiny_models["mixtral-echo"], algorithm="ngram", topk=1, num_draft_tokens=4)
    )
    with serve(create_app(real_engine_gateway_config(engine_url))) as url:
        yield url


def client(url, key=KEY):
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def test_completion_and_stream_through_the_gateway(gateway_url):
    model = client(gateway_url).models.list().data[0].id
    # greedy: sampled, the tiny test model ends with end-of-text as its first token about one time in five
    done = client(gateway_url).completions.create(model=model, prompt="def add(a, b):", max_tokens=8, temperature=0)
    assert done.usage.completion_tokens == 8 and done.choices[0].text
    chunks = list(
        client(gateway_url).completions.create(
            model=model, prompt="for i in range(10):", max_tokens=6, stream=True, temperature=0
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices)


def test_chat_stream_through_the_gateway(gateway_url):
    model = client(gateway_url).models.list().data[0].id
    stream = client(gateway_url).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "12 + 30 ="}], max_tokens=6, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_bad_key_is_refused_with_openai_error(gateway_url):
    import openai

    with pytest.raises(openai.AuthenticationError):
        client(gateway_url, key="sk-wrong").completions.create(model="m", prompt="x", max_tokens=2)
