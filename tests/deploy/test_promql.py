"""The PromQL name finder the metric checks rely on: table-driven over the constructs our dashboards and rules use."""

from __future__ import annotations

import pytest

from tests.deploy.promql import metric_names

CASES = [
    ("up", {"up"}),
    ('up{job="moe-serve-engine"} == 0', {"up"}),
    ("sum by (tenant, status) (rate(moe_serve:requests_total[5m]))", {"moe_serve:requests_total"}),
    (
        'sum(rate(a_total{status=~"5.."}[5m])) / sum(rate(b_total[5m]))',
        {"a_total", "b_total"},
    ),
    (
        "histogram_quantile(0.99, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket[$__rate_interval])))",
        {"sglang:time_to_first_token_seconds_bucket"},
    ),
    ('x{le=~"1(\\\\.0)?", tenant=~"$tenant"} > 1e3', {"x"}),
    ("deriv(sum by (instance) (sglang:num_queue_reqs)[10m:1m]) > 0", {"sglang:num_queue_reqs"}),
    ("a > 8 and b unless on (instance) c offset 5m", {"a", "b", "c"}),
    (
        "(1 - tenant:moe_serve_ttft_within_1s:ratio_rate1h) > (14.4 * 0.01)",
        {"tenant:moe_serve_ttft_within_1s:ratio_rate1h"},
    ),
    ("a / ignoring (x) group_left (y) b", {"a", "b"}),
    ("vector(1) + scalar(time())", set()),
    ("label_values(moe_serve:requests_total, tenant)", {"moe_serve:requests_total", "tenant"}),
]


@pytest.mark.parametrize(("expr", "expected"), CASES)
def test_metric_names(expr, expected):
    assert metric_names(expr) == expected
