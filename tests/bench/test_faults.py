"""The fault bench's CI variant (bench/faults.py --ci): engine test doubles as real processes (SIGKILL is real), a
private redis-server stopped and started, the gateway in between, a Mooncake window at 2x capacity, ~25 s, loopback
only. Nothing may be lost or duplicated; both faults must be recovered from; refusals must be clear errors."""

import json
import os
from pathlib import Path

import pytest

from tests.gateway.redis_server import redis_server_binary

TRACES = Path(os.environ.get("MOE_SERVE_TRACES_DIR") or Path(__file__).resolve().parents[3] / "shared" / "traces")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(redis_server_binary() is None, reason="needs the redis-server binary")
@pytest.mark.skipif(not (TRACES / "mooncake_conversation_trace.jsonl").exists(), reason=f"no traces in {TRACES}")
def test_fault_replay_loses_and_duplicates_nothing(tmp_path):
    from bench import faults

    code = faults.main(["--ci", "--traces", str(TRACES), "--out", str(tmp_path)])
    result = json.loads((tmp_path / "faults.json").read_text())
    assert (result["lost"], result["duplicated"]) == (0, 0), result["failures"]
    assert code == 0
    assert result["complete"] > 0 and result["complete"] + result["error"] == result["requests"]
    codes = {row["code"] for row in result["errors_by_code"]}
    assert "engine_overloaded" in codes  # 2x capacity: the excess is refused, not queued
    assert all(row["status"] in (200, 429, 503) for row in result["errors_by_code"])
    kill = result["recovery"]["engine"]["killed_at_s"]
    before = [s for s in result["timeline"] if s["t_s"] < kill]
    assert before[-1]["outstanding:1"] > 0  # the kill hit requests in flight
    assert result["recovery"]["engine"]["recovery_s"] is not None
    assert result["recovery"]["redis"]["recovery_s"] is not None
    assert result["recovery"]["redis"]["settled_s"] is not None
    assert (tmp_path / "faults.png").read_bytes()[:8] == PNG_MAGIC
