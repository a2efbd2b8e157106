"""The client-side timing of bench/_load.py: TPOT from first and last text, ITL from the gaps between chunks."""

import json

import httpx
import pytest

from bench import _load
from bench._load import Completion


def test_tpot_and_itl_of_one_request():
    # first token at 0.5 s, then steps of 0.1 s with one 1.0 s stall (another request's prefill)
    chunks = (0.5, 1.5, 1.6, 1.7, 1.8)
    c = Completion(ttft_s=0.5, e2e_s=1.8, output_tokens=5, chunk_s=chunks)
    assert c.tpot_s == pytest.approx(1.3 / 4)  # the stall is in TPOT
    assert c.itl_s == pytest.approx(0.1)  # not in the median gap


def test_a_single_chunk_has_no_itl():
    assert Completion(ttft_s=0.2, e2e_s=0.2, output_tokens=1, chunk_s=(0.2,)).itl_s is None


def test_run_batch_averages_itl_over_requests(monkeypatch):
    done = iter(
        [
            Completion(ttft_s=0.1, e2e_s=0.4, output_tokens=4, chunk_s=(0.1, 0.2, 0.3, 0.4)),
            Completion(ttft_s=0.1, e2e_s=0.1, output_tokens=4, chunk_s=(0.1,)),  # all four tokens in one chunk
            Completion(ttft_s=0.1, e2e_s=0.7, output_tokens=4, chunk_s=(0.1, 0.3, 0.5, 0.7)),
        ]
    )
    monkeypatch.setattr(_load, "complete", lambda *args, **kwargs: next(done))
    result = _load.run_batch("http://unused", "m", ["a", "b", "c"], 4, concurrency=1)
    assert result["itl_ms"] == pytest.approx(150.0)  # requests without a gap do not count
    assert result["tpot_ms"] == pytest.approx((100 + 0 + 200) / 3)


def test_requests_share_one_client_and_are_timed_from_its_stream(monkeypatch):
    """Every request goes through the process's one client (building one per request cost ~34 ms of CPU each, in
    TTFT and in a wave's arrival spread); no keep-alive, so no request meets a connection an engine closed."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content)["prompt"])
        chunks = [{"choices": [{"text": t}]} for t in ("a", "b", "c")] + [
            {"choices": [], "usage": {"completion_tokens": 3}}
        ]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=body)

    shared = httpx.Client(transport=httpx.MockTransport(handler))
    monkeypatch.setattr(_load, "client", lambda: shared)
    done = [_load.complete("http://engine", "m", p, 3) for p in ("x", "y")]
    assert seen == ["x", "y"] and [c.output_tokens for c in done] == [3, 3]
    assert all(len(c.chunk_s) == 3 and c.ttft_s <= c.e2e_s for c in done)
    monkeypatch.undo()
    assert _load.client() is _load.client()
    assert _load.client()._transport._pool._max_keepalive_connections == 0


def test_a_request_row_carries_its_first_and_longest_gap():
    stalled = _load.Completion(ttft_s=1.0, e2e_s=3.0, output_tokens=4, chunk_s=(1.0, 2.5, 2.55, 2.6))
    assert _load._request_row(stalled) == [1000.0, 666.7, 1500.0, 1500.0, 4]
    one_chunk = _load.Completion(ttft_s=0.5, e2e_s=0.5, output_tokens=1, chunk_s=(0.5,))
    assert _load._request_row(one_chunk) == [500.0, None, None, None, 1]


def test_steal_share_is_the_other_guests_part_of_the_ticks_between_two_readings(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    real_open = open

    def fake_open(path, *args, **kwargs):
        return real_open(stat if path == "/proc/stat" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    stat.write_text("cpu  100 0 50 800 10 0 5 20 0 0\ncpu0 1 2 3\n")
    before = _load.cpu_ticks()
    assert before == (985, 20)
    stat.write_text("cpu  160 0 60 900 10 0 5 50 0 0\n")
    assert _load.steal_share(before, _load.cpu_ticks()) == pytest.approx(30 / 200)
    assert _load.steal_share(before, before) is None and _load.steal_share(None, before) is None
    stat.unlink()
    assert _load.cpu_ticks() is None
