"""Report numbers on a tiny case computed by hand (definitions of vllm bench serve / SGLang bench_serving)."""

from __future__ import annotations

import csv
import json

import pytest

from service.traces.replay import ReplayResult, RequestRecord
from service.traces.report import Slo, summarize, time_series
from service.traces.report_files import write_report


def _record(i, due, sent, ttft, itl, e2e, n_out, error=None, spec=None):
    return RequestRecord(
        index=i,
        due_s=due,
        sent_s=sent,
        input_tokens=100,
        max_tokens=n_out,
        ttft_s=ttft,
        itl_s=itl,
        e2e_s=e2e,
        output_tokens=n_out,
        prompt_tokens=100,
        error=error,
        spec=spec,
    )


# Four requests over a 4 s run:
#   A: TTFT 0.1, E2E 0.5, 5 tokens -> TPOT (0.5-0.1)/4 = 0.1 s; ITLs 0.1 x4
#   B: TTFT 0.3, E2E 1.3, 3 tokens -> TPOT 0.5 s; ITLs 0.5, 0.5
#   C: TTFT 0.2, E2E 0.2, 1 token  -> no TPOT (counts as 0 for goodput)
#   D: failed
RECORDS = (
    _record(0, 0.0, 0.001, 0.1, (0.1,) * 4, 0.5, 5, spec={"spec_accept_length": 2.0, "spec_verify_ct": 2}),
    _record(1, 1.0, 1.003, 0.3, (0.5, 0.5), 1.3, 3, spec={"spec_accept_length": 3.0, "spec_verify_ct": 1}),
    _record(2, 2.0, 2.002, 0.2, (), 0.2, 1),
    _record(3, 3.0, 3.010, None, (), None, 0, error="HTTP 500: boom"),
)
RESULT = ReplayResult(records=RECORDS, duration_s=4.0, started_unix_s=0.0)


def test_hand_computed_summary():
    s = summarize(RESULT, Slo(ttft_ms=250, tpot_ms=100))
    assert (s["requests"], s["completed"], s["failed"]) == (4, 3, 1)
    assert s["request_throughput"] == pytest.approx(3 / 4)
    assert s["output_throughput"] == pytest.approx(9 / 4)
    assert s["total_token_throughput"] == pytest.approx((300 + 9) / 4)
    assert s["concurrency"] == pytest.approx((0.5 + 1.3 + 0.2) / 4)
    assert s["ttft_ms"]["mean"] == pytest.approx(200) and s["ttft_ms"]["median"] == pytest.approx(200)
    assert s["ttft_ms"]["p99"] == pytest.approx(200 + 0.98 * 100)  # linear between 200 and 300
    assert s["tpot_ms"]["mean"] == pytest.approx(300) and s["tpot_ms"]["p50"] == pytest.approx(300)
    assert s["itl_ms"]["mean"] == pytest.approx((4 * 100 + 2 * 500) / 6)
    assert s["itl_ms"]["median"] == pytest.approx(100)
    assert s["e2el_ms"]["max"] == pytest.approx(1300)
    assert s["lateness_ms"]["median"] == pytest.approx(2.5) and s["lateness_ms"]["max"] == pytest.approx(10)
    # Good: A (TTFT 100 <= 250, TPOT 100 <= 100, inclusive) and C (TPOT 0); B misses both; D failed.
    assert s["good_requests"] == 2
    assert s["request_goodput"] == pytest.approx(2 / 4)
    assert s["slo_attainment"] == pytest.approx(2 / 4)
    assert s["slo_attainment_by_metric"] == {"ttft": pytest.approx(2 / 4), "tpot": pytest.approx(2 / 4)}
    assert s["errors"] == {"HTTP 500": 1}
    assert s["speculation"] == {
        "requests": 2,
        "mean_accept_length": pytest.approx(2.5),
        "verify_steps": 3,
        "tokens_per_verify_step": pytest.approx(8 / 3),
    }


def test_no_slo_means_no_goodput():
    s = summarize(RESULT)
    assert s["request_goodput"] is None and s["slo_attainment"] is None


def test_time_series_buckets():
    rows = time_series(RESULT, bucket_s=2.0)
    assert [r["arrival_rate"] for r in rows] == [1.0, 1.0]
    assert [(r["completed"], r["errors"]) for r in rows] == [(2, 0), (1, 1)]
    assert rows[0]["tpot_p50_ms"] == pytest.approx(300)
    assert rows[1]["tpot_p50_ms"] is None and rows[1]["ttft_p50_ms"] == pytest.approx(200)


def test_report_files(tmp_path):
    summary = summarize(RESULT, Slo(tpot_ms=100))
    paths = write_report(tmp_path, RESULT, summary, time_series(RESULT, 1.0), {"title": "tiny"})
    assert all(p.stat().st_size > 0 for p in paths)
    assert json.loads(paths[0].read_text())["summary"]["good_requests"] == 2
    rows = list(csv.DictReader(paths[1].open()))
    assert [r["tpot_ms"] for r in rows] == ["100.000", "500.000", "", ""]
    assert rows[3]["error"] == "HTTP 500: boom"
    assert paths[3].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
