"""Engine client behaviour through the gateway: abort on client disconnect, retry before the first token, balancing."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from service.gateway.app import create_app
from service.gateway.replicas import Replica, pick_replica
from tests.gateway.conftest import KEY, gateway_config
from tests.gateway.engine_double import Record, Script, create_engine_double
from tests.gateway.servers import serve

AUTH = {"Authorization": f"Bearer {KEY}"}


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_client_disconnect_aborts_engine_request(gateway, fresh_engine, path):
    script, record, _ = fresh_engine
    script.token_delay_s = 0.05  # 200 tokens take 10 s: the client leaves long before the end
    body = {"model": "tiny-moe", "max_tokens": 200, "stream": True}
    body |= {"prompt": "hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", gateway + path, json=body, headers=AUTH) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
    rid = record.requests[-1]["rid"]
    assert wait_for(lambda: rid in record.aborts), "gateway did not send /abort_request"
    assert wait_for(lambda: rid in record.disconnects), "gateway did not close the engine stream"
    assert rid not in record.completed


def test_finished_stream_is_not_aborted(gateway, fresh_engine):
    _, record, _ = fresh_engine
    body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", gateway + "/v1/completions", json=body, headers=AUTH) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    rid = record.requests[-1]["rid"]
    assert wait_for(lambda: rid in record.completed)
    assert record.aborts == []


@pytest.mark.parametrize("stream", [False, True])
def test_retry_on_replica_that_failed_before_any_token(stream):
    bad_script, bad_record = Script(fail_status=500), Record()
    good_script, good_record = Script(), Record()
    with (
        serve(create_engine_double(bad_script, bad_record)) as bad,
        serve(create_engine_double(good_script, good_record)) as good,
        serve(create_app(gateway_config((bad, good)))) as gateway,
    ):
        for _ in range(3):
            response = httpx.post(
                gateway + "/v1/completions",
                json={"model": "tiny-moe", "prompt": "hi", "max_tokens": 2, "stream": stream},
                headers=AUTH,
            )
            assert response.status_code == 200, response.text
        assert len(good_record.requests) == 3
        assert len(bad_record.requests) == 2  # failed twice in a row: cooling down until a probe says otherwise


def test_unhealthy_replica_recovers_after_probe():
    script, record = Script(healthy=False), Record()
    with serve(create_engine_double(script, record)) as engine, serve(create_app(gateway_config((engine,)))) as gateway:
        assert httpx.get(gateway + "/ready").status_code == 503
        script.healthy = True
        assert wait_for(lambda: httpx.get(gateway + "/ready").status_code == 200)


def test_least_outstanding_spreads_concurrent_streams():
    scripts, records = [Script(token_delay_s=0.02), Script(token_delay_s=0.02)], [Record(), Record()]
    with (
        serve(create_engine_double(scripts[0], records[0])) as a,
        serve(create_engine_double(scripts[1], records[1])) as b,
        serve(create_app(gateway_config((a, b)))) as gateway,
    ):

        async def burst():
            async with httpx.AsyncClient(timeout=10) as client:
                body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 10}
                replies = await asyncio.gather(
                    *(client.post(gateway + "/v1/completions", json=body, headers=AUTH) for _ in range(20))
                )
                assert all(r.status_code == 200 for r in replies)

        asyncio.run(burst())
        assert len(records[0].requests) + len(records[1].requests) == 20
        assert abs(len(records[0].requests) - len(records[1].requests)) <= 4


@pytest.mark.parametrize(
    ("replicas", "exclude", "cap", "expected"),
    [
        ([Replica("a", 3), Replica("b", 1)], set(), 10, "b"),
        ([Replica("a", 3), Replica("b", 1, healthy=False)], set(), 10, "a"),
        ([Replica("a", 3), Replica("b", 1)], {"b"}, 10, "a"),
        ([Replica("a", 3), Replica("b", 1)], set(), 1, None),
        ([Replica("a", 1, served=5), Replica("b", 1, served=2)], set(), 10, "b"),
        ([], set(), 10, None),
    ],
)
def test_pick_replica(replicas, exclude, cap, expected):
    picked = pick_replica(replicas, exclude, lambda r: r.outstanding < cap)
    assert (picked.url if picked else None) == expected


@pytest.mark.parametrize(
    ("message", "status", "code"),
    [
        (
            "The input (99 tokens) is longer than the model's context length (64 tokens).",
            413,
            "context_length_exceeded",
        ),
        ("stop list too long", 400, "engine_rejected"),
    ],
)
def test_error_event_before_first_token_gets_a_status(gateway, fresh_engine, message, status, code):
    fresh_engine[0].stream_error = message
    body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 3, "stream": True}
    response = httpx.post(gateway + "/v1/completions", json=body, headers=AUTH)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["message"] == message


def test_engine_dying_mid_stream_ends_the_stream_with_an_error_event(gateway, fresh_engine):
    fresh_engine[0].die_after_tokens = 2
    body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 5, "stream": True}
    with httpx.stream("POST", gateway + "/v1/completions", json=body, headers=AUTH) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data:")]
    assert len(lines) == 4  # two tokens, the error, [DONE]
    assert '"engine_unavailable"' in lines[2]
    assert lines[3] == "data: [DONE]"


def test_refused_stream_is_not_aborted(gateway, fresh_engine):
    fresh_engine[0].stream_error = "bad request"
    body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 3, "stream": True}
    assert httpx.post(gateway + "/v1/completions", json=body, headers=AUTH).status_code == 400
    assert fresh_engine[1].aborts == []


def test_slow_health_probe_takes_a_replica_out_only_after_consecutive_timeouts():
    from service.gateway.config import EngineConfig
    from service.gateway.engine_client import EngineClient

    answers = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/health":
            return httpx.Response(200, json={"data": [{"id": "m"}], "max_total_num_tokens": 4096})
        if answers.pop(0) == "timeout":
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(200, json={"data": [{"id": "m"}]})

    client = EngineClient(EngineConfig(urls=("http://engine",)), transport=httpx.MockTransport(handler))

    async def probe(*results):
        answers.extend(results)
        await client.probe_all()
        return client.replicas[0].healthy

    async def scenario():
        assert await probe("timeout")  # one slow answer: still in
        assert not await probe("timeout")  # two in a row: out
        assert await probe("ok")  # an answer brings it back and resets the count
        assert await probe("timeout")

    asyncio.run(scenario())


def test_one_failure_does_not_take_the_only_replica_out(gateway, fresh_engine):
    """A single failed request moves on (here: nowhere else, so 503) but the replica stays in: the next request is
    served at once, not after the failure cooldown."""
    fresh_engine[0].fail_status = 500
    body = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 2}
    assert httpx.post(gateway + "/v1/completions", json=body, headers=AUTH).status_code == 503
    fresh_engine[0].fail_status = None
    assert httpx.post(gateway + "/v1/completions", json=body, headers=AUTH).status_code == 200
