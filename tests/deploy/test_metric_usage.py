"""Every series a dashboard or rule reads is in metric_names.py (checked against real /metrics elsewhere) or recorded
by our own rules; every listed name is read somewhere; dashboards are well formed for Grafana's file provisioning."""

from __future__ import annotations

import json

import pytest

from tests.deploy import metric_names
from tests.deploy.usage import all_exprs, dashboard_files, recorded_names, rule_files, used_names


def test_files_are_found():
    assert {p.stem for p in dashboard_files()} == {"overview", "speculation", "tenants"}
    assert rule_files()
    assert len(all_exprs()) > 40


def test_every_used_name_is_exported_or_recorded():
    known = metric_names.ALL | recorded_names()
    unknown = {name: where for name, where in used_names().items() if name not in known}
    assert not unknown, f"series read but neither exported nor recorded: {unknown}"


def test_every_listed_name_is_used():
    unused = metric_names.ALL - set(used_names())
    assert not unused, f"listed in metric_names.py but read by no dashboard or rule: {sorted(unused)}"


def test_recording_rule_names_never_take_a_source_prefix():
    # level:metric:operations; a recorded `moe_serve:...` would be mistaken for a gateway metric
    for name in recorded_names():
        assert not name.startswith(("moe_serve:", "sglang:")), name
        assert name.count(":") == 2, name


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
def test_dashboard_shape(path):
    board = json.loads(path.read_text())
    assert board["uid"] == f"moe-serve-{path.stem}"
    assert "moe-serve" in board["tags"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        position = panel["gridPos"]
        assert position["x"] >= 0 and position["x"] + position["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"]
            for name in ("$tenant", "$ttft_target"):
                if name in target["expr"]:
                    assert name[1:] in variables, (panel["title"], name)
