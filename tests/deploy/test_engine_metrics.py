"""A real SGLang engine (CPU, our plugin, NGRAM speculation, --enable-metrics) exports every `sglang:` name the
dashboards and rules read, and, once the policy plugin is on this branch (issue 8), every `moe_serve:` engine name.

SGLang creates labelled series on first use and publishes its scheduler gauges every 40th decode step
(--decode-log-interval), so the fixture decodes well over 40 steps, leaves one stream early (an abort) and sends
requests with gateway hints (K = 0 next to K > 0, a lossy expert budget) before it scrapes. The engine configuration
is the one tests/moe_sglang/test_policy_in_engine.py uses, so a full run starts it once (EnginePool)."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import time
from dataclasses import replace

import httpx
import pytest

from tests.deploy import metric_names
from tests.deploy.exposition import exported_names, sampled_names

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PROMPT = [5, 6, 7, 8] * 6  # repeating: NGRAM finds drafts to propose and verify
NEW_TOKENS = 64


def _generate(url: str, *, stream: bool = False, **hints) -> None:
    sampling = {"max_new_tokens": NEW_TOKENS, "temperature": 0.0, "ignore_eos": True}
    if hints:
        sampling["custom_params"] = {"moe_serve": hints}
    body = {"input_ids": PROMPT, "sampling_params": sampling, "stream": stream}
    httpx.post(f"{url}/generate", json=body, timeout=300).raise_for_status()


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.5)


@pytest.fixture(scope="module")
def scraped(engine_pool, tiny_models) -> str:
    pytest.importorskip("sglang", reason="SGLang is not installed (run scripts/setup.sh)")
    from tests.engine import engine_config

    config = engine_config(tiny_models["mixtral"], algorithm="ngram", topk=1, num_draft_tokens=4)
    url = engine_pool.url(replace(config, extra_args=("--enable-metrics",)))
    for stream in (False, True, False):
        _generate(url, stream=stream)
    # K = 0 next to K > 0 in one batch (mixed steps), then a lossy expert budget alone (a batch with a request that
    # does not allow it keeps every expert).
    hinted = [{"tenant": "deploy-off", "policy": "static", "max_k": 0}, {"tenant": "deploy-on", "policy": "static"}]
    with concurrent.futures.ThreadPoolExecutor(len(hinted)) as pool:
        for future in [pool.submit(_generate, url, **hints) for hints in hinted]:
            future.result()
    _generate(url, tenant="deploy-lossy", policy="static", allow_lossy_budget=True, expert_budget=2)
    # A stream the client leaves early: SGLang aborts it, which creates sglang:num_aborted_requests_total.
    long_body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 400, "temperature": 0.0}, "stream": True}
    with httpx.stream("POST", f"{url}/generate", json=long_body, timeout=300) as response:
        next(response.iter_lines())
    _wait_for(lambda: "sglang:num_aborted_requests_total{" in httpx.get(f"{url}/metrics", timeout=30).text)
    return httpx.get(f"{url}/metrics", timeout=30).text


def test_every_listed_engine_name_is_exported(scraped):
    missing = metric_names.ENGINE - exported_names(scraped)
    assert not missing, f"dashboards/rules read engine series that SGLang's /metrics does not export: {sorted(missing)}"


def test_requests_gave_every_listed_engine_name_a_sample(scraped):
    missing = metric_names.ENGINE - sampled_names(scraped)
    assert not missing, f"no samples after requests for: {sorted(missing)}"


def test_every_listed_plugin_name_is_exported(scraped):
    if importlib.util.find_spec("moe_sglang.metrics") is None:
        pytest.skip("moe_sglang/metrics.py (issue 8) is not on this branch yet")
    missing = metric_names.ENGINE_PLUGIN - exported_names(scraped)
    assert not missing, f"the speculation dashboard reads plugin series the engine does not export: {sorted(missing)}"
