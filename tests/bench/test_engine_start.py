"""bench/engine_start.py's summary: medians, ranges and per-round ratios to the baseline (no engine needed)."""

import pytest

from bench.engine_start import METRICS, summarize


def _row(round_, fork_start, spawn_start):
    fork = dict.fromkeys(METRICS, 10.0) | {"start_to_first_token_s": fork_start}
    spawn = dict.fromkeys(METRICS, 10.0) | {"start_to_first_token_s": spawn_start}
    return {"round": round_, "fork": fork, "spawn": spawn}


def test_ratios_are_per_round_against_the_last_variant():
    rows = [_row(0, 20.0, 40.0), _row(1, 30.0, 40.0), _row(2, 20.0, 20.0)]
    start = next(s for s in summarize(rows, ["fork", "spawn"]) if s["metric"] == "start_to_first_token_s")
    assert start["fork"] == 20.0 and start["spawn"] == 40.0
    assert start["fork/spawn"] == pytest.approx(0.75)  # median of 0.5, 0.75, 1.0, not 20 / 40
    assert start["fork/spawn_range"] == "0.50-1.00"
    assert start["fork_range"] == "20.0-30.0"
    assert "spawn/spawn" not in start
