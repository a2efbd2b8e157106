"""A real SGLang engine (CPU, our plugin, NGRAM speculation, --enable-metrics) exports every `sglang:` name the
dashboards and rules read. SGLang creates labelled series on first use, so requests run before the scrape, and
`--decode-log-interval 1` makes the scheduler publish its gauges after every decode step instead of every 40th."""

from __future__ import annotations

import time

import httpx
import pytest

from moe_sglang.launch import EngineConfig, SpeculationConfig
from tests.deploy import metric_names
from tests.deploy.exposition import exported_names, sampled_names

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

# A repeating prompt gives NGRAM drafts to propose and verify.
PROMPT = [5, 6, 7, 8] * 6


@pytest.fixture(scope="module")
def scraped(engine_pool, tiny_models) -> str:
    pytest.importorskip("sglang", reason="SGLang is not installed (run scripts/setup.sh)")
    config = EngineConfig(
        model_path=str(tiny_models["mixtral"]),
        port=0,
        speculation=SpeculationConfig(algorithm="ngram"),
        extra_args=("--enable-metrics", "--decode-log-interval", "1"),
    )
    url = engine_pool.url(config)
    for stream in (False, True):
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 12, "temperature": 0.0}, "stream": stream}
        httpx.post(f"{url}/generate", json=body, timeout=300).raise_for_status()
    # A stream the client leaves early: SGLang aborts it, which creates sglang:num_aborted_requests_total.
    long_body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 400, "temperature": 0.0}, "stream": True}
    with httpx.stream("POST", f"{url}/generate", json=long_body, timeout=300) as response:
        next(response.iter_lines())
    _wait_for(lambda: "sglang:num_aborted_requests_total{" in httpx.get(f"{url}/metrics", timeout=30).text)
    return httpx.get(f"{url}/metrics", timeout=30).text


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.5)


def test_every_listed_engine_name_is_exported(scraped):
    missing = metric_names.ENGINE - exported_names(scraped)
    assert not missing, f"dashboards/rules read engine series that SGLang's /metrics does not export: {sorted(missing)}"


def test_requests_gave_every_listed_engine_name_a_sample(scraped):
    missing = metric_names.ENGINE - sampled_names(scraped)
    assert not missing, f"no samples after requests for: {sorted(missing)}"
