"""bench.replay's per-request account of SLO misses: which requests were over the TPOT SLO (or failed), with where
their time went (the first interval holds a prefill that ran right after the request's own)."""

from service.traces.replay import ReplayResult, RequestRecord


def record(index: int, ttft_s: float, itl_s: tuple[float, ...], error: str | None = None) -> RequestRecord:
    e2e = None if error else ttft_s + sum(itl_s)
    return RequestRecord(
        index=index,
        due_s=0.0,
        sent_s=0.0,
        input_tokens=100,
        max_tokens=len(itl_s) + 1,
        ttft_s=ttft_s,
        itl_s=itl_s,
        e2e_s=e2e,
        output_tokens=len(itl_s) + 1,
        prompt_tokens=100,
        error=error,
    )


def test_misses_lists_the_requests_over_the_slo_with_their_intervals():
    from bench.replay import misses

    stalled = record(0, 0.5, (3.0,) + (0.08,) * 22)  # its first interval holds another request's prefill
    steady = record(1, 3.5, (0.08,) * 23)
    one_token = record(2, 0.5, ())  # no TPOT: not a miss
    failed = record(3, 0.5, (0.08,), error="HTTP 500")
    result = ReplayResult(records=(stalled, steady, one_token, failed), duration_s=6.0, started_unix_s=0.0)
    out = misses(result, slo_tpot_ms=100.0)
    assert [m["index"] for m in out] == [0, 3]
    assert out[0]["first_itl_ms"] == 3000.0 and out[0]["max_itl_ms"] == 3000.0
    assert abs(out[0]["tpot_ms"] - (3.0 + 22 * 0.08) / 23 * 1e3) < 1e-6 and out[0]["ttft_ms"] == 500.0
    assert out[1]["error"] == "HTTP 500" and out[1]["tpot_ms"] is None
    assert misses(result, slo_tpot_ms=300.0) == [out[1]]
