"""bench/gateway_overhead.py end to end on a tiny load: it writes latency rows, the gateway's CPU per request and per
token (solved from its own CPU clock), and the RSS of held streams. Plumbing, not numbers."""

import json
import math


def test_gateway_overhead_writes_cpu_and_rss(tmp_path):
    from bench import gateway_overhead

    argv = ["--concurrency", "1,4", "--requests", "24", "--repeats", "1", "--max-tokens", "4", "--streams", "40",
            "--out", str(tmp_path)]  # fmt: skip
    assert gateway_overhead.main(argv) == 0
    data = json.loads((tmp_path / "gateway_overhead.json").read_text())
    assert [r["concurrency"] for r in data["rows"]] == [1, 4]
    for row in data["rows"]:
        assert row["samples"] >= 24 and row["ttft_p50_gateway_ms"] > 0
        assert len(row["ttft_p99_added_spread_ms"]) == 2
    cpu = data["cpu"]
    assert math.isfinite(cpu["cpu_ms_per_request"]) and math.isfinite(cpu["cpu_us_per_token"])
    assert len(cpu["cpu_runs"]) == 4 and all(run["cpu_s"] >= 0 for run in cpu["cpu_runs"])
    assert data["rss"]["open"] == 40 and data["rss"]["peak_mb"] >= data["rss"]["idle_mb"] > 0
    assert (tmp_path / "gateway_overhead.png").exists()
