"""Issue 6 end to end: a 60-second window of the real Mooncake trace, replayed open-loop through the moe-serve gateway
into the SGLang CPU engine serving the bundled model, produces a complete report.

The trace is thinned (whole sessions) and outputs are capped so a 2-core CPU finishes it in about a minute; inputs are
clipped to the bundled model's 256-token context. Latency targets are not asserted (this is a shared CI machine)."""

import json
from pathlib import Path

import pytest

from service.cli import main as moe_serve
from tests.engine import engine_config
from tests.gateway.conftest import KEY, real_engine_gateway_config
from tests.gateway.servers import serve
from tests.models.test_assets import TARGET

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


@pytest.mark.skipif(
    not TRACE.exists(), reason=f"trace not found at {TRACE} (CI clones the repo with shared/ beside it)"
)
def test_mooncake_window_through_gateway_and_engine(engine_pool, tmp_path):
    from service.gateway.app import create_app

    engine_url = engine_pool.url(engine_config(TARGET, algorithm="ngram", topk=1, num_draft_tokens=4))
    out = tmp_path / "report"
    with serve(create_app(real_engine_gateway_config(engine_url))) as gateway:
        argv = ["replay", str(TRACE), "--url", gateway, "--model", "moe-tiny", "--tokenizer", str(TARGET)]
        argv += ["--window", "0:60", "--thin", "0.1", "--max-output-tokens", "16", "--context-len", "256"]
        argv += [
            "--api-key",
            KEY,
            "--slo-ttft-ms",
            "5000",
            "--slo-tpot-ms",
            "500",
            "--timeout-s",
            "300",
            "--out",
            str(out),
        ]
        assert moe_serve(argv) == 0
    summary = json.loads((out / "summary.json").read_text())["summary"]
    rows = (out / "requests.csv").read_text().strip().splitlines()
    assert summary["completed"] == summary["requests"] > 0 and summary["failed"] == 0, summary
    assert len(rows) == summary["requests"] + 1  # header + one row per request
    assert (out / "timeseries.png").stat().st_size > 0 and (out / "timeseries.csv").exists()
    assert summary["ttft_ms"]["p99"] > 0 and summary["slo_attainment"] is not None
