"""`moe-serve replay` end to end on a real Mooncake window, against the scripted TEST DOUBLE server in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server_url():
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest.scripted_server", "--port", "0", "--ttft-ms", "5", "--itl-ms", "1"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_replay_mooncake_window(traces_dir, tiny_tokenizer_file, server_url, tmp_path):
    out = tmp_path / "report"
    rc = main(
        [
            "replay",
            str(traces_dir / "mooncake_conversation_trace.jsonl"),
            "--url",
            server_url,
            "--model",
            "test-double",
            "--tokenizer",
            str(tiny_tokenizer_file),
            "--window",
            "0:7",
            "--time-scale",
            "4",
            "--context-len",
            "8192",
            "--slo-ttft-ms",
            "1000",
            "--slo-tpot-ms",
            "50",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    report = json.loads((out / "summary.json").read_text())
    summary, meta = report["summary"], report["meta"]
    # Mooncake's first 7 s hold the arrivals at t = 0, 3 and 6 s.
    assert summary["requests"] == summary["completed"] > 0
    assert meta["context_fit"]["clipped"] + meta["context_fit"]["skipped"] > 0  # some inputs exceed 8k
    assert summary["slo_attainment"] is not None and summary["speculation"]["requests"] == summary["completed"]
    for name in ("requests.csv", "timeseries.csv", "timeseries.png"):
        assert (out / name).stat().st_size > 0


def test_replay_rejects_an_unknown_format(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("hello\n")
    with pytest.raises(ValueError, match="cannot tell the trace format"):
        main(["replay", str(path), "--url", "http://x", "--model", "m", "--out", str(tmp_path)])
