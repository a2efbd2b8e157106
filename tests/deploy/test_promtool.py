"""Prometheus' own checker on our files: `promtool check rules|config` and the rule unit tests (`promtool test rules`).

promtool comes from Debian's `prometheus` package; these tests skip, naming the apt line, where it is absent.
"""

from __future__ import annotations

import pytest

from tests.deploy.tools import require_binary, run
from tests.deploy.usage import REPO, RULE_TESTS, rule_files


@pytest.mark.parametrize("path", rule_files(), ids=lambda p: p.name)
def test_check_rules(path):
    result = run([require_binary("promtool"), "check", "rules", str(path)])
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests():
    tests = sorted(RULE_TESTS.glob("*.test.yml"))
    assert tests
    result = run([require_binary("promtool"), "test", "rules", *map(str, tests)])
    assert "SUCCESS" in result.stdout and "FAILED" not in result.stdout


def test_compose_prometheus_config():
    # --syntax-only: the rule_files glob names the container's path, checked by test_check_rules instead
    run(
        [require_binary("promtool"), "check", "config", "--syntax-only", str(REPO / "deploy/prometheus/prometheus.yml")]
    )


def test_every_alert_is_unit_tested():
    import yaml

    from tests.deploy.usage import rules

    alerts = {rule["alert"] for path in rule_files() for rule in rules(path) if "alert" in rule}
    tested = {
        case["alertname"]
        for path in RULE_TESTS.glob("*.test.yml")
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts <= tested, f"alerts without a firing unit test: {sorted(alerts - tested)}"
