"""The speculation-policy plugin (moe_sglang/metrics.py, issue 8) declares every `moe_serve:` engine name the
speculation dashboard reads. Its metrics live in the scheduler process of a real engine (see test_engine_metrics.py
for the scrape); here the module's own declarations are exposed in a fresh interpreter, since it registers them in
prometheus_client's global registry."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.deploy import metric_names
from tests.deploy.exposition import exported_names
from tests.deploy.usage import REPO

EXPOSE = (
    "from prometheus_client import generate_latest\n"
    "from moe_sglang.metrics import SpecMetrics\n"
    "SpecMetrics()\n"
    "print(generate_latest().decode())\n"
)


def test_plugin_declares_every_listed_name():
    if importlib.util.find_spec("moe_sglang.metrics") is None:
        pytest.skip("moe_sglang/metrics.py (issue 8) is not on this branch yet")
    result = subprocess.run([sys.executable, "-c", EXPOSE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    missing = metric_names.ENGINE_PLUGIN - exported_names(result.stdout)
    assert not missing, (
        f"the speculation dashboard reads plugin series moe_sglang/metrics.py does not declare: {sorted(missing)}"
    )
