"""Where the deploy files read metrics: PromQL of every dashboard panel and variable, and of every Prometheus rule."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.deploy.promql import metric_names

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "deploy" / "grafana" / "dashboards"
RULES = REPO / "deploy" / "prometheus" / "rules"
RULE_TESTS = REPO / "deploy" / "prometheus" / "tests"

# Grafana's variable query `label_values(metric, label)` is not PromQL: its first argument is the selector.
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.S)


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def rule_files() -> list[Path]:
    return sorted(RULES.glob("*.yml"))


def _panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_exprs(path: Path) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for each panel target and query variable of one dashboard."""
    board = json.loads(path.read_text())
    for panel in _panels(board.get("panels", [])):
        for target in panel.get("targets", []):
            yield f"{path.name}: panel {panel['title']!r}", target["expr"]
    for variable in board.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = _LABEL_VALUES.match(query)
        yield f"{path.name}: variable {variable['name']!r}", match.group(1) if match else query


def rules(path: Path) -> Iterator[dict]:
    for group in yaml.safe_load(path.read_text())["groups"]:
        yield from group["rules"]


def rule_exprs(path: Path) -> Iterator[tuple[str, str]]:
    for rule in rules(path):
        yield f"{path.name}: {rule.get('record') or rule.get('alert')}", rule["expr"]


def recorded_names() -> set[str]:
    return {rule["record"] for path in rule_files() for rule in rules(path) if "record" in rule}


def all_exprs() -> list[tuple[str, str]]:
    found = [item for path in dashboard_files() for item in dashboard_exprs(path)]
    return found + [item for path in rule_files() for item in rule_exprs(path)]


def used_names() -> dict[str, list[str]]:
    """metric name -> where it is read."""
    used: dict[str, list[str]] = {}
    for where, expr in all_exprs():
        for name in metric_names(expr):
            used.setdefault(name, []).append(where)
    return used
