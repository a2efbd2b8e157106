"""Arrival-only traces (a single `Timestamp` column, as AdaSpec's are): loading, lengths drawn from another trace or
fixed, and `moe-serve replay` on one. The timestamps below are SYNTHETIC; the BurstGPT rows are the three real rows of
file 1 (shared/traces/README.md)."""

from __future__ import annotations

import json

import pytest

from service.cli import main
from service.traces.arrivals import Lengths, lengths_from, load_arrivals
from service.traces.formats import detect_format, load_trace
from tests.traces.test_burstgpt import HEADER_1, REAL_ROWS
from tests.traces.test_cli import server_url  # noqa: F401 - fixture

ARRIVALS = ["Timestamp", "12.5", "10", "11.25", "", "30"]  # unsorted, a blank line


@pytest.fixture
def arrivals_file(tmp_path):
    path = tmp_path / "trace1.csv"
    path.write_text("\n".join(ARRIVALS) + "\n")
    return path


@pytest.fixture
def burst_file(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("\n".join([HEADER_1, *REAL_ROWS, "130,ChatGPT,99,0,99,API log"]) + "\n")  # a failed row
    return path


def test_timestamps_only_file_with_fixed_lengths(arrivals_file):
    assert detect_format(arrivals_file) == "arrivals"
    s = load_trace(arrivals_file, lengths=lengths_from(input_tokens=600, output_tokens=32))
    assert [r.arrival_s for r in s.requests] == [0.0, 1.25, 2.5, 20.0]
    assert {(r.input_tokens, r.output_tokens) for r in s.requests} == {(600, 32)}
    assert all(len(r.prefix_blocks) == 2 for r in s.requests)  # 600 tokens: two 512-token blocks
    assert len({b for r in s.requests for b in r.prefix_blocks}) == 8  # private: nothing shared
    assert "in=600" in s.source and "out=32" in s.source


def test_lengths_drawn_from_another_traces_requests_are_seeded(arrivals_file, burst_file):
    source = load_trace(burst_file)
    real_pairs = {(472, 18), (1087, 230), (417, 276)}  # the failed row (no output) is never drawn
    draws = [
        [
            (r.input_tokens, r.output_tokens)
            for r in load_trace(arrivals_file, lengths=lengths_from(source, seed=s)).requests
        ]
        for s in (1, 1, 2, 3)
    ]
    assert draws[0] == draws[1]  # same seed, same lengths
    assert draws[0] != draws[2] or draws[0] != draws[3]
    assert all(set(d) <= real_pairs for d in draws)


def test_a_fixed_value_replaces_its_column_of_the_draw(arrivals_file, burst_file):
    s = load_trace(arrivals_file, lengths=lengths_from(load_trace(burst_file), output_tokens=7, seed=4))
    assert {r.output_tokens for r in s.requests} == {7}
    assert {r.input_tokens for r in s.requests} <= {472, 1087, 417}


def test_milliseconds_and_azure_style_stamps(tmp_path):
    ms = tmp_path / "ms.csv"
    ms.write_text("Timestamp\n1000\n2500\n")
    fixed = lengths_from(input_tokens=1, output_tokens=1)
    assert [r.arrival_s for r in load_arrivals(ms, fixed, unit_s=0.001).requests] == [0.0, 1.5]
    dated = tmp_path / "dated.csv"
    dated.write_text('"Timestamp"\r\n2023-11-16 18:15:46.5\r\n2023-11-16 18:15:48.0')
    assert [r.arrival_s for r in load_arrivals(dated, fixed).requests] == [0.0, 1.5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Timestamp\n1,2\n", "one column"),
        ("Timestamp\nsoon\n", "bad timestamp"),
        ("Timestamp\n-3\n", "negative"),
        ("Timestamp\n", "no requests"),
        ("Time\n1\n", "cannot tell"),
    ],
)
def test_bad_files_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_trace(path, lengths=lengths_from(input_tokens=1, output_tokens=1))


def test_lengths_are_needed_for_arrivals_and_refused_for_full_traces(arrivals_file, burst_file):
    with pytest.raises(ValueError, match="arrival times only"):
        load_trace(arrivals_file)
    with pytest.raises(ValueError, match="records its own request lengths"):
        load_trace(burst_file, lengths=lengths_from(input_tokens=1, output_tokens=1))
    with pytest.raises(ValueError, match="both a fixed input and a fixed output"):
        Lengths(input_tokens=5)


def test_replay_an_arrival_only_trace(arrivals_file, burst_file, tiny_tokenizer_file, server_url, tmp_path):  # noqa: F811
    out = tmp_path / "report"
    argv = ["replay", str(arrivals_file), "--url", server_url, "--model", "test-double"]
    argv += ["--tokenizer", str(tiny_tokenizer_file), "--time-scale", "10", "--out", str(out)]
    argv += ["--lengths-from", str(burst_file), "--output-tokens", "4", "--seed", "3"]
    assert main(argv) == 0
    report = json.loads((out / "summary.json").read_text())
    assert report["summary"]["completed"] == 4 and report["summary"]["failed"] == 0
    assert report["meta"]["schedule"].startswith("arrivals:trace1.csv(from burstgpt:burst.csv,out=4)")
