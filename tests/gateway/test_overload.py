"""Overload admission: bounds read from the engine, 503 (pool) / 429 (tenant) with Retry-After before any engine work,
the lowest priority refused first, and every bound given back however a request ends."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import httpx
import pytest

from service.gateway.app import create_app
from service.gateway.errors import GatewayError
from service.gateway.overload import InFlight, OverloadConfig, has_room, replica_bounds
from service.gateway.replicas import Replica
from tests.gateway.conftest import ACME, KEY, OTHER_KEY, SLOW, gateway_config
from tests.gateway.engine_double import Record, Script, create_engine_double
from tests.gateway.servers import serve

HIGH, LOW = replace(ACME, priority=7), replace(SLOW, priority=0, rpm=10_000, tpm=10_000_000)


def replica(running=4, kv=1000, **fields) -> Replica:
    return Replica("http://r", engine_max_running=running, engine_kv_tokens=kv, **fields)


def test_bounds_come_from_the_engine_unless_configured():
    config = OverloadConfig(queue_factor=2.0, fallback_requests=7)
    assert replica_bounds(replica(), config) == (8, 2000)
    assert replica_bounds(replica(running=None, kv=None), config) == (7, None)  # engine said nothing
    assert replica_bounds(replica(), replace(config, replica_requests=3, replica_tokens=50)) == (3, 50)
    assert not has_room(replica(outstanding=8), config, 1)
    assert not has_room(replica(outstanding=1, outstanding_tokens=1900), config, 200)
    assert has_room(replica(outstanding=0, outstanding_tokens=0), config, 10_000)  # alone, even a huge one


def test_pool_counts_healthy_replicas_and_priority_classes_fill_less():
    replicas = [replica(), replica(), replica(healthy=False)]
    gate = InFlight(OverloadConfig(queue_factor=1.0, lowest_priority_fill=0.5), replicas)
    assert gate.pool() == (8, 2000)
    priorities = (7, 3, 0)
    assert [gate.fill(p, priorities) for p in priorities] == [1.0, 0.75, 0.5]
    leases = [gate.admit(LOW, 10, priorities) for _ in range(4)]  # the lowest class fills half the pool
    with pytest.raises(GatewayError) as refused:
        gate.admit(LOW, 10, priorities)
    assert refused.value.status == 503 and refused.value.code == "engine_overloaded"
    assert refused.value.headers["Retry-After"] == "1"
    leases += [gate.admit(HIGH, 10, priorities) for _ in range(4)]  # the highest may fill the rest
    with pytest.raises(GatewayError):
        gate.admit(HIGH, 10, priorities)
    for lease in leases:
        gate.release(lease)
        gate.release(lease)  # twice is once
    assert (gate.requests, gate.tokens, gate.by_tenant) == (0, 0, {})


def test_token_bound_and_tenant_bounds():
    gate = InFlight(OverloadConfig(queue_factor=1.0), [replica(running=100, kv=100)])
    gate.admit(HIGH, 60, (7,))
    with pytest.raises(GatewayError) as tokens:
        gate.admit(HIGH, 50, (7,))
    assert tokens.value.status == 503
    small = replace(HIGH, name="small", max_in_flight=1, max_in_flight_tokens=30)
    gate.admit(small, 20, (7,))
    with pytest.raises(GatewayError) as requests:
        gate.admit(small, 1, (7,))
    assert requests.value.status == 429 and requests.value.code == "too_many_concurrent_requests"
    roomy = replace(small, name="roomy", max_in_flight=5)
    gate.admit(roomy, 15, (7,))
    with pytest.raises(GatewayError) as held:
        gate.admit(roomy, 16, (7,))
    assert held.value.status == 429 and held.value.code == "too_many_concurrent_tokens"


def test_no_healthy_replica_is_503_unavailable():
    gate = InFlight(OverloadConfig(), [replica(healthy=False)])
    with pytest.raises(GatewayError) as refused:
        gate.admit(HIGH, 1, (7,))
    assert refused.value.code == "engine_unavailable"


STREAM = {"model": "tiny-moe", "prompt": "hi", "max_tokens": 4, "stream": True}


async def open_streams(url: str, key: str, count: int, client: httpx.AsyncClient):
    """Start `count` streams; each returns its status once its headers came (200 streams stay open)."""
    headers = {"Authorization": f"Bearer {key}"}
    responses = await asyncio.gather(
        *(
            client.send(
                client.build_request("POST", url + "/v1/completions", json=STREAM, headers=headers), stream=True
            )
            for _ in range(count)
        )  # fmt: skip
    )
    return responses


def test_overload_is_refused_before_the_engine_and_frees_up():
    """The double runs 2 at a time and says so; at queue_factor 2 the replica holds 4: the 5th and 6th get 503, low
    priority first, and nothing of theirs reaches the engine."""
    script, record = Script(max_running=2, kv_tokens=10_000, first_token_delay_s=0.0, token_delay_s=0.3), Record()
    config = gateway_config(("http://x",), tenants=(HIGH, LOW), overload=OverloadConfig(lowest_priority_fill=0.5))
    with serve(create_engine_double(script, record)) as engine:
        config = replace(config, engine=replace(config.engine, urls=(engine,)))
        with serve(create_app(config)) as url:

            async def scenario():
                async with httpx.AsyncClient(timeout=30) as client:
                    low = await open_streams(url, OTHER_KEY, 3, client)  # low priority may fill 4 * 0.5 = 2
                    high = await open_streams(url, KEY, 3, client)  # high: up to 4 in all
                    statuses = ([r.status_code for r in low], [r.status_code for r in high])
                    bodies = [(await r.aread(), r.headers) for r in low + high if r.status_code != 200]
                    for r in low + high:
                        await r.aclose()
                    return statuses, bodies

            statuses, refused = asyncio.run(scenario())
            assert sorted(statuses[0]) == [200, 200, 503] and sorted(statuses[1]) == [200, 200, 503]
            for body, headers in refused:
                assert b'"engine_overloaded"' in body and headers["retry-after"] == "1"
            assert len(record.requests) == 4
            gate = None
            for _ in range(100):  # the closed streams give their room back
                gate = httpx.get(url + "/metrics").text
                if 'moe_serve:requests_in_flight{tenant="acme"} 0.0' in gate:
                    break
                asyncio.run(asyncio.sleep(0.05))
            response = httpx.post(url + "/v1/completions", json={**STREAM, "stream": False},
                                  headers={"Authorization": f"Bearer {OTHER_KEY}"})  # fmt: skip
            assert response.status_code == 200
            assert 'moe_serve:overload_refused_total{reason="engine_overloaded",tenant="slow"} 1.0' in gate


def test_room_is_given_back_when_the_client_leaves_before_the_first_token(gateway, fresh_engine, served_gateway):
    fresh_engine[0].first_token_delay_s = 0.5
    state = served_gateway[0].state.gateway

    async def leave_early():
        async with httpx.AsyncClient(timeout=5) as client:
            for stream in (True, False):
                with pytest.raises(httpx.ReadTimeout):
                    await client.post(gateway + "/v1/completions", json={**STREAM, "stream": stream},
                                      headers={"Authorization": f"Bearer {KEY}"}, timeout=0.1)  # fmt: skip
        for _ in range(100):
            if state.in_flight.requests == 0:
                return
            await asyncio.sleep(0.02)

    asyncio.run(leave_early())
    assert (state.in_flight.requests, state.in_flight.tokens) == (0, 0)
