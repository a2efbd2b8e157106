"""What the gateway does with the request fields of issue 17, against the engine TEST DOUBLE: the `speculation`
extension within the tenant's bounds, the stats field only when asked, logprobs forwarded (and never a silent null),
fields it does not serve refused by name. The real engine: tests/gateway/test_openai_sdk.py."""

from __future__ import annotations

import json

import httpx
import pytest

from service.gateway.logprobs import fill_text_offsets
from service.gateway.tenants import Tenant, hash_key, tenant_from_dict, tenant_to_dict
from tests.gateway.conftest import KEY
from tests.gateway.test_errors import assert_openai_error

BOUNDED_KEY = "sk-bounded-test"
BOUNDED = Tenant(
    name="bounded",
    key_hashes=(hash_key(BOUNDED_KEY),),
    rpm=10_000,
    tpm=10_000_000,
    policy="moe_serve",
    allowed_policies=("static", "cascade"),
    max_k=2,
)
COMPLETION = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 3}
CHAT = {"model": "tiny-moe", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def bounded(served_gateway, gateway):
    served_gateway[0].state.gateway.tenants.put(BOUNDED)
    return gateway


def post(url: str, body: dict, key: str = BOUNDED_KEY, path: str = "/v1/completions") -> httpx.Response:
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def sent_hints(engine) -> dict:
    return engine[1].requests[-1]["custom_params"]["moe_serve"]


def test_tenant_bounds_reach_the_engine_without_a_speculation_field(bounded, fresh_engine):
    assert post(bounded, COMPLETION).status_code == 200
    hints = sent_hints(fresh_engine)
    assert hints["policy"] == "moe_serve" and hints["max_k"] == 2 and "expert_budget" not in hints


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_speculation_field_is_folded_into_the_hints(bounded, fresh_engine, path):
    body = (COMPLETION if path == "/v1/completions" else CHAT) | {"speculation": {"policy": "cascade", "max_k": 0}}
    assert post(bounded, body, path=path).status_code == 200
    sent = fresh_engine[1].requests[-1]
    assert "speculation" not in sent
    assert sent["custom_params"]["moe_serve"]["policy"] == "cascade"
    assert sent["custom_params"]["moe_serve"]["max_k"] == 0


def test_lossy_budget_within_bounds(gateway, fresh_engine):
    # ACME allows the lossy budget and sets no minimum
    body = COMPLETION | {"speculation": {"expert_budget": 2, "policy": "moe-serve"}}
    assert post(gateway, body, key=KEY).status_code == 200
    assert sent_hints(fresh_engine)["expert_budget"] == 2


@pytest.mark.parametrize(
    ("speculation", "status", "param"),
    [
        ({"policy": "no-such-policy"}, 400, "speculation.policy"),
        ({"policy": "adaspec"}, 403, "speculation.policy"),
        ({"max_k": 3}, 403, "speculation.max_k"),
        ({"max_k": -1}, 400, "speculation.max_k"),
        ({"expert_budget": 4}, 403, "speculation.expert_budget"),
        ({"stats": "maybe"}, 400, "speculation.stats"),
        ({"k": 1}, 400, "speculation.k"),
    ],
)
def test_asking_for_more_than_allowed_is_refused_by_name(bounded, fresh_engine, speculation, status, param):
    error = assert_openai_error(post(bounded, COMPLETION | {"speculation": speculation}), status)
    assert error["param"] == param
    assert error["type"] == ("permission_error" if status == 403 else "invalid_request_error")
    assert fresh_engine[1].requests == []


def test_stats_only_when_asked(gateway, fresh_engine):
    plain = post(gateway, COMPLETION, key=KEY).json()
    assert "metrics" not in plain and "sglext" not in plain
    asked = post(gateway, COMPLETION | {"speculation": {"stats": True}}, key=KEY).json()
    assert asked["metrics"]["speculative_decoding"]["policy"] == "moe_serve"


@pytest.mark.parametrize("include_usage", [False, True])
def test_streamed_stats_ride_the_final_chunk(gateway, fresh_engine, include_usage):
    body = CHAT | {"stream": True, "speculation": {"stats": True, "max_k": 0}}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    events = []
    with httpx.stream(
        "POST", gateway + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == [] and last["metrics"]["speculative_decoding"]["num_steps_k0"] == 2
    assert ("usage" in last) == include_usage


def test_logprob_fields_are_forwarded(gateway, fresh_engine):
    post(gateway, CHAT | {"logprobs": True, "top_logprobs": 2}, key=KEY, path="/v1/chat/completions")
    sent = fresh_engine[1].requests[-1]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2
    post(gateway, COMPLETION | {"logprobs": 3, "stream": True}, key=KEY)
    assert fresh_engine[1].requests[-1]["logprobs"] == 3


def test_logprob_requests_are_verified_exactly(gateway, fresh_engine):
    # ACME allows the lossy budget; a request asking for logprobs does not offer it to the engine
    post(gateway, CHAT | {"logprobs": True}, key=KEY, path="/v1/chat/completions")
    assert sent_hints(fresh_engine)["allow_lossy_budget"] is False
    post(gateway, CHAT, key=KEY, path="/v1/chat/completions")
    assert sent_hints(fresh_engine)["allow_lossy_budget"] is True
    both = COMPLETION | {"logprobs": 0, "speculation": {"expert_budget": 2}}
    error = assert_openai_error(post(gateway, both, key=KEY), 400)
    assert error["param"] == "speculation.expert_budget" and "logprobs" in error["message"]


def test_an_answer_without_the_logprobs_asked_for_is_an_error_not_a_null(gateway, fresh_engine):
    # the double answers "logprobs": null, as the engine would if it dropped them
    error = assert_openai_error(post(gateway, COMPLETION | {"logprobs": 1}, key=KEY), 502)
    assert error["param"] == "logprobs"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (CHAT | {"top_logprobs": 2}, "top_logprobs"),
        (CHAT | {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        (COMPLETION | {"logprobs": 21}, "logprobs"),
        (COMPLETION | {"logit_bias": {"5": 10}}, "logit_bias"),
        (COMPLETION | {"best_of": 3}, "best_of"),
        (CHAT | {"response_format": {"type": "json_object"}}, "response_format"),
        (CHAT | {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        (COMPLETION | {"regex": "a+"}, "regex"),
    ],
)
def test_fields_that_cannot_be_served_are_a_400_naming_them(gateway, fresh_engine, body, param):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    error = assert_openai_error(post(gateway, body, key=KEY, path=path), 400)
    assert error["param"] == param and param in error["message"]
    assert fresh_engine[1].requests == []


def test_fields_at_their_off_value_are_accepted(gateway, fresh_engine):
    body = CHAT | {"tool_choice": "none", "tools": [], "response_format": {"type": "text"}, "logit_bias": None}
    assert post(gateway, body, key=KEY, path="/v1/chat/completions").status_code == 200
    assert not {"tool_choice", "tools", "response_format", "logit_bias"} & set(fresh_engine[1].requests[-1])


def test_text_offsets_count_characters_across_chunks():
    offsets: dict[int, int] = {}
    first = [{"index": 0, "logprobs": {"tokens": ["ab", " c"], "text_offset": [-1, -1]}}]
    second = [{"index": 0, "logprobs": {"tokens": ["é"], "text_offset": [-1]}}, {"index": 1, "logprobs": None}]
    fill_text_offsets(first, offsets)
    fill_text_offsets(second, offsets)
    assert first[0]["logprobs"]["text_offset"] == [0, 2] and second[0]["logprobs"]["text_offset"] == [4]


def test_tenant_speculation_bounds_load_and_round_trip():
    raw = {"name": "t", "rpm": 1, "tpm": 1, "allowed_policies": ["static", "moe_serve", "*"], "max_k": 0}
    tenant = tenant_from_dict(raw | {"min_expert_budget": 2})
    assert tenant.allowed_policies == ("static", "moe_serve", "*") and tenant.max_k == 0
    assert tenant_from_dict(tenant_to_dict(tenant)) == tenant
    for bad, message in (
        ({"allowed_policies": ["nope"]}, "unknown policies"),
        ({"allowed_policies": "static"}, "allowed_policies"),
        ({"max_k": -1}, "max_k"),
        ({"min_expert_budget": 0}, "min_expert_budget"),
        ({"max_k": True}, "max_k"),
    ):
        with pytest.raises(ValueError, match=message):
            tenant_from_dict(raw | bad)
