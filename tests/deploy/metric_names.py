"""Every series name the dashboards and rules read, by who exports it. Tests check each list against a real /metrics.

Edit this list together with a dashboard or rule: test_metric_usage.py fails on a name used but not listed and on a
name listed but used nowhere; test_gateway_metrics.py, test_engine_metrics.py and test_engine_plugin_metrics.py fail on
a listed name that the running gateway, SGLang engine or our engine plugin does not export.
"""

from __future__ import annotations

# service/gateway/metrics.py (issue 5)
GATEWAY = frozenset(
    {
        "moe_serve:requests_total",
        "moe_serve:time_to_first_token_seconds_bucket",
        "moe_serve:time_to_first_token_seconds_count",
        "moe_serve:inter_token_latency_seconds_bucket",
        "moe_serve:e2e_request_latency_seconds_bucket",
        "moe_serve:prompt_tokens_total",
        "moe_serve:generation_tokens_total",
        "moe_serve:rate_limited_total",
        "moe_serve:requests_in_flight",
        "moe_serve:client_aborts_total",
        "moe_serve:spec_accept_length_bucket",
        "moe_serve:spec_accept_length_count",
        "moe_serve:spec_proposed_drafts_total",
        "moe_serve:spec_accepted_drafts_total",
        "moe_serve:spec_verify_steps_total",
        "moe_serve:engine_replica_healthy",
        "moe_serve:engine_replica_outstanding",
    }
)

# SGLang 0.5.23 with --enable-metrics (sglang/srt/observability/metrics_collector.py)
ENGINE = frozenset(
    {
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
        "sglang:e2e_request_latency_seconds_bucket",
        "sglang:num_requests_total",
        "sglang:num_aborted_requests_total",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:spec_accept_length",
        "sglang:spec_accept_rate",
        "sglang:spec_num_draft_tokens",
        "sglang:spec_num_steps",
        "sglang:spec_verify_calls_total",
    }
)

# moe_sglang/metrics.py (issue 8): the speculation-policy plugin's series on the engine's /metrics.
ENGINE_PLUGIN = frozenset(
    {
        "moe_serve:spec_k_chosen_bucket",
        "moe_serve:spec_k_chosen_count",
        "moe_serve:spec_off_request_steps_total",
        "moe_serve:spec_accepted_at_position_total",
        "moe_serve:spec_proposed_at_position_total",
        "moe_serve:spec_step_accept_length_bucket",
        "moe_serve:spec_utility_bucket",
        "moe_serve:spec_step_seconds_sum",
        "moe_serve:spec_step_seconds_count",
        "moe_serve:spec_mixed_steps_total",
        "moe_serve:verify_unique_experts_bucket",
        "moe_serve:verify_budget_dropped_experts_total",
        "moe_serve:verify_tokens_total",
        # vLLM's spec_decode counters under our prefix (dashboards written for vLLM read them)
        "moe_serve:spec_decode_num_drafts_total",
        "moe_serve:spec_decode_num_draft_tokens_total",
        "moe_serve:spec_decode_num_accepted_tokens_total",
        "moe_serve:spec_decode_num_accepted_tokens_per_pos_total",
    }
)

# Made by Prometheus itself for every scrape target.
PROMETHEUS = frozenset({"up"})

ALL = GATEWAY | ENGINE | ENGINE_PLUGIN | PROMETHEUS
