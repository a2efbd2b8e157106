"""What the gateway sends is what SGLang 0.5.23 accepts: engine bodies validate against SGLang's own OpenAI request
models, and the `moe_serve` hints survive SamplingParams' msgpack IPC typing (no engine is started).

Skipped where SGLang is not installed; importing it takes seconds, hence the marker.
"""

from __future__ import annotations

import pytest

from service.gateway.hints import HINTS_KEY, engine_body
from service.gateway.schemas import ChatCompletionRequest, CompletionRequest
from tests.gateway.conftest import ACME

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


@pytest.fixture(scope="module")
def protocol():
    return pytest.importorskip("sglang.srt.entrypoints.openai.protocol")  # imported here: deselecting stays cheap


@pytest.fixture(scope="module")
def sampling():
    return pytest.importorskip("sglang.srt.sampling.sampling_params")


SAMPLING = {"max_tokens": 4, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.05, "seed": 1, "stop": ["\n"],
            "n": 2, "ignore_eos": True, "presence_penalty": 0.1, "frequency_penalty": 0.2}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
def test_completion_body_is_a_valid_sglang_request(protocol, stream):
    user = CompletionRequest.model_validate({"model": "m", "prompt": "hi", "stream": stream, **SAMPLING})
    body = engine_body(user.engine_fields(), ACME, "moe-1", forward_priority=True)
    parsed = protocol.CompletionRequest.model_validate(body)
    assert parsed.rid == "moe-1" and parsed.priority == ACME.priority
    assert parsed.custom_params == {HINTS_KEY: body["custom_params"][HINTS_KEY]}
    assert parsed.return_spec_tokens_details is True
    assert parsed.top_k == 5 and parsed.min_p == 0.05 and parsed.ignore_eos is True and parsed.n == 2
    assert (parsed.stream_options is not None and parsed.stream_options.include_usage) == stream


def test_chat_body_is_a_valid_sglang_request(protocol):
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    user = ChatCompletionRequest.model_validate({"model": "m", "messages": messages, "max_completion_tokens": 3})
    body = engine_body(user.engine_fields(), ACME, "moe-2", forward_priority=False)
    parsed = protocol.ChatCompletionRequest.model_validate(body)
    assert parsed.max_completion_tokens == 3 and parsed.priority is None and parsed.rid == "moe-2"
    assert parsed.custom_params[HINTS_KEY]["tenant"] == "acme"


def test_hints_survive_sampling_params_ipc(sampling):
    import msgspec

    body = engine_body({"model": "m", "prompt": "hi"}, ACME, "moe-3", forward_priority=True)
    params = sampling.SamplingParams(max_new_tokens=4, custom_params=body["custom_params"])
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(params), type=sampling.SamplingParams)
    assert decoded.custom_params == body["custom_params"]
