"""The BurstGPT loader, both layouts, on the three real rows of file 1 (shared/traces/README.md)."""

from __future__ import annotations

import pytest

from service.traces.burstgpt import load_burstgpt
from service.traces.formats import detect_format, load_trace

HEADER_1 = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
HEADER_3 = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type"
REAL_ROWS = [
    "5,ChatGPT,472,18,490,Conversation log",
    "45,ChatGPT,1087,230,1317,Conversation log",
    "118,GPT-4,417,276,693,Conversation log",
]
EXPECTED = [(0.0, 472, 18), (40.0, 1087, 230), (113.0, 417, 276)]


def _write(tmp_path, header, rows, name="burst.csv"):
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_real_rows_first_layout(tmp_path):
    s = load_burstgpt(_write(tmp_path, HEADER_1, REAL_ROWS))
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in s.requests] == EXPECTED
    assert all(r.session is None for r in s.requests)
    assert len({b for r in s.requests for b in r.prefix_blocks}) == 1 + 3 + 1  # private blocks: 472, 1087, 417 tokens


def test_real_rows_in_the_session_layout(tmp_path):
    # The real rows' values in file 3's layout; the Session ID and Elapsed time columns and the float, non-zero-based
    # timestamps are SYNTHETIC (file 3 style), added to exercise the second layout.
    rows = []
    for k, row in enumerate(REAL_ROWS):
        t, model, *rest = row.split(",")
        rows.append(",".join([f"{19440000 + int(t)}.0", f"s{k % 2}", "1.5", model, *rest]))
    s = load_burstgpt(_write(tmp_path, HEADER_3, rows))
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in s.requests] == EXPECTED
    assert [r.session for r in s.requests] == ["s0", "s1", "s0"]


def test_model_filter(tmp_path):
    s = load_burstgpt(_write(tmp_path, HEADER_1, REAL_ROWS), models=frozenset({"GPT-4"}))
    assert [(r.arrival_s, r.input_tokens) for r in s.requests] == [(0.0, 417)]


def test_failed_rows_are_kept_with_zero_output(tmp_path):
    # SYNTHETIC failed row (Response tokens == 0) between the real ones.
    rows = [REAL_ROWS[0], "30,ChatGPT,800,0,800,API log", *REAL_ROWS[1:]]
    s = load_burstgpt(_write(tmp_path, HEADER_1, rows))
    assert [r.output_tokens for r in s.requests] == [18, 0, 230, 276]


def test_format_detection(tmp_path):
    path = _write(tmp_path, HEADER_1, REAL_ROWS)
    assert detect_format(path) == "burstgpt"
    assert len(load_trace(path)) == 3


@pytest.mark.parametrize(
    ("header", "rows", "message"),
    [
        ("Timestamp,Model,Tokens", REAL_ROWS, "neither BurstGPT layout"),
        (HEADER_1, ["5,ChatGPT,472,18"], "expected 6 columns"),
        (HEADER_1, ["soon,ChatGPT,472,18,490,Conversation log"], "could not convert"),
    ],
)
def test_bad_input_is_rejected(tmp_path, header, rows, message):
    with pytest.raises(ValueError, match=message):
        load_burstgpt(_write(tmp_path, header, rows))
