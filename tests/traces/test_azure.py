"""The Azure 2023 loader on the real conversation trace, and its line-ending and timestamp handling."""

from __future__ import annotations

import numpy as np
import pytest

from service.traces.azure import load_azure, parse_ticks


@pytest.fixture(scope="module")
def azure(traces_dir):
    return load_azure(traces_dir / "azure_llm_2023_conv.csv")


def test_real_file_facts(azure, traces_dir):
    raw = (traces_dir / "azure_llm_2023_conv.csv").read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n") and not raw.endswith(b"\n")  # the file really is CRLF, unterminated
    assert len(azure) == 19_366
    assert azure.duration_s == pytest.approx(3502, abs=0.5)
    assert len(azure) / azure.duration_s == pytest.approx(5.5, abs=0.05)
    n_in = [r.input_tokens for r in azure.requests]
    n_out = [r.output_tokens for r in azure.requests]
    assert np.percentile(n_in, [50, 90, 99]) == pytest.approx([1020, 2735, 4142], abs=1)
    assert np.percentile(n_out, [50, 90, 99]) == pytest.approx([129, 424, 601], abs=1)


def test_last_row_without_newline_is_read(azure, traces_dir):
    last = (traces_dir / "azure_llm_2023_conv.csv").read_bytes().rsplit(b"\r\n", 1)[1].decode()
    _, n_in, n_out = last.split(",")
    assert (azure.requests[-1].input_tokens, azure.requests[-1].output_tokens) == (int(n_in), int(n_out))


def test_private_prefix_blocks_never_shared(azure):
    blocks = [b for r in azure.requests for b in r.prefix_blocks]
    assert len(blocks) == len(set(blocks))


def test_seven_fraction_digits_are_kept():
    a = parse_ticks("2023-11-16 18:15:46.6805900")
    b = parse_ticks("2023-11-16 18:15:46.6805901")
    assert b - a == 1  # 100 ns, below datetime's microsecond
    assert parse_ticks("2023-11-16 18:15:47") - a == 3_194_100


@pytest.mark.parametrize("newline", ["\r\n", "\n"])
@pytest.mark.parametrize("final", [True, False])
def test_synthetic_line_endings(tmp_path, newline, final):
    # Synthetic rows in the real format, to vary only the line endings.
    lines = [
        "TIMESTAMP,ContextTokens,GeneratedTokens",
        "2023-11-16 18:15:46.5000000,374,44",
        "2023-11-16 18:15:48.2500000,396,109",
    ]
    path = tmp_path / "t.csv"
    path.write_bytes((newline.join(lines) + (newline if final else "")).encode())
    s = load_azure(path)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in s.requests] == [(0.0, 374, 44), (1.75, 396, 109)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("TIMESTAMP,Context\r\n", "expected header"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46,1\r\n", ":2: expected 3 columns"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\r\nyesterday,1,2\r\n", "bad timestamp"),
    ],
)
def test_bad_input_is_rejected(tmp_path, body, message):
    path = tmp_path / "t.csv"
    path.write_text(body)
    with pytest.raises(ValueError, match=message):
        load_azure(path)
