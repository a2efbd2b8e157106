"""Prometheus metrics of one gateway, in its own registry (no global state). PromQL a dashboard uses sits by each.

Buckets follow vLLM's serving metrics so dashboards built for it read ours. Engine replica state is read from the
engine client's stats at scrape time (stats, then metrics: STYLE.md 7).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from service.gateway.limits_outage import StoreStats
from service.gateway.replicas import ReplicaStats

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
ACCEPT_BUCKETS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)


class GatewayMetrics:
    def __init__(
        self, replica_stats: Callable[[], list[ReplicaStats]], limits_stats: Callable[[], StoreStats] | None = None
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # sum by (tenant, status) (rate(moe_serve:requests_total[5m]))
        self.requests = Counter("moe_serve:requests", "Requests answered", ["tenant", "endpoint", "status"], registry=r)
        # histogram_quantile(0.99, sum by (le, tenant) (rate(moe_serve:time_to_first_token_seconds_bucket[5m])))
        self.ttft = Histogram(
            "moe_serve:time_to_first_token_seconds",
            "Gateway-observed TTFT",
            ["tenant"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        # histogram_quantile(0.5, sum by (le, tenant) (rate(moe_serve:inter_token_latency_seconds_bucket[5m])))
        self.itl = Histogram(
            "moe_serve:inter_token_latency_seconds",
            "Gap between streamed chunks",
            ["tenant"],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        # histogram_quantile(0.99, sum by (le, tenant) (rate(moe_serve:e2e_request_latency_seconds_bucket[5m])))
        self.e2e = Histogram(
            "moe_serve:e2e_request_latency_seconds", "Arrival to last byte", ["tenant"], buckets=E2E_BUCKETS, registry=r
        )
        # sum by (tenant) (rate(moe_serve:prompt_tokens_total[1m])) * 60   -- prompt tokens per minute
        self.prompt_tokens = Counter("moe_serve:prompt_tokens", "Prompt tokens (engine usage)", ["tenant"], registry=r)
        # sum by (tenant) (rate(moe_serve:generation_tokens_total[1m]))     -- output tokens per second
        self.generation_tokens = Counter(
            "moe_serve:generation_tokens", "Generated tokens (engine usage)", ["tenant"], registry=r
        )
        # sum by (tenant, limit) (increase(moe_serve:rate_limited_total[5m]))
        self.rate_limited = Counter(
            "moe_serve:rate_limited", "Requests refused by RPM/TPM limits", ["tenant", "limit"], registry=r
        )
        # sum by (tenant, reason) (rate(moe_serve:overload_refused_total[5m]))   -- refused for lack of room in flight
        self.overload_refused = Counter(
            "moe_serve:overload_refused",
            "Requests refused before the engine: engines at capacity (503) or tenant concurrency (429)",
            ["tenant", "reason"],
            registry=r,
        )
        # sum by (tenant) (moe_serve:requests_in_flight)
        self.in_flight = Gauge("moe_serve:requests_in_flight", "Requests being served", ["tenant"], registry=r)
        # sum by (tenant) (rate(moe_serve:client_aborts_total[5m]))
        self.client_aborts = Counter(
            "moe_serve:client_aborts",
            "Streams the client closed early (engine request aborted)",
            ["tenant"],
            registry=r,
        )
        # Relayed from the engine's per-request sglext.spec_tokens_details, when it speculates:
        # histogram_quantile(0.5, sum by (le, tenant) (rate(moe_serve:spec_accept_length_bucket[5m])))
        self.spec_accept_length = Histogram(
            "moe_serve:spec_accept_length",
            "Mean accepted tokens per verify step, per request",
            ["tenant"],
            buckets=ACCEPT_BUCKETS,
            registry=r,
        )
        # sum by (tenant) (rate(moe_serve:spec_accepted_drafts_total[5m])) / sum by (tenant) (rate(moe_serve:spec_proposed_drafts_total[5m]))
        self.spec_proposed = Counter(
            "moe_serve:spec_proposed_drafts",
            "Draft tokens verified (the policy's cut; all proposed where the engine has no moe-serve plugin)",
            ["tenant"],
            registry=r,
        )
        self.spec_accepted = Counter("moe_serve:spec_accepted_drafts", "Draft tokens accepted", ["tenant"], registry=r)
        # sum by (tenant) (rate(moe_serve:spec_verify_steps_total[5m]))
        self.spec_verify = Counter("moe_serve:spec_verify_steps", "Verify forward passes", ["tenant"], registry=r)
        r.register(_ReplicaCollector(replica_stats))
        if limits_stats is not None:
            r.register(_StoreCollector(limits_stats))

    def observe_usage(self, tenant: str, usage: dict | None) -> None:
        if not usage:
            return
        self.prompt_tokens.labels(tenant).inc(max(int(usage.get("prompt_tokens") or 0), 0))
        self.generation_tokens.labels(tenant).inc(max(int(usage.get("completion_tokens") or 0), 0))

    def observe_spec(self, tenant: str, sglext: dict | None, summary: dict | None = None) -> None:
        """One request's speculation: the moe-serve plugin's summary (`metrics.speculative_decoding`: drafts
        verified, as the policy cut them) where the engine sent one, else SGLang's SpecTokensDetails (one dict or
        one per choice), which counts every draft the drafter proposed, verified or not."""
        if isinstance(summary, dict) and summary.get("num_spec_steps"):
            self._spec(tenant, summary["mean_acceptance_length"], summary["num_draft_tokens"],
                       summary["num_accepted_draft_tokens"], summary["num_spec_steps"])  # fmt: skip
            return
        details = (sglext or {}).get("spec_tokens_details")
        for item in details if isinstance(details, list) else [details]:
            if not isinstance(item, dict) or not item.get("spec_verify_ct"):
                continue
            self._spec(tenant, item.get("spec_accept_length") or 0.0, item.get("spec_num_proposed_drafts") or 0,
                       item.get("spec_num_correct_drafts") or 0, item["spec_verify_ct"])  # fmt: skip

    def _spec(self, tenant: str, accept_length: float, proposed: int, accepted: int, verifies: int) -> None:
        self.spec_accept_length.labels(tenant).observe(float(accept_length))
        self.spec_proposed.labels(tenant).inc(int(proposed))
        self.spec_accepted.labels(tenant).inc(int(accepted))
        self.spec_verify.labels(tenant).inc(int(verifies))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ReplicaCollector:
    """Engine replica state at scrape time."""

    def __init__(
        self, replica_stats: Callable[[], list[ReplicaStats]], limits_stats: Callable[[], StoreStats] | None = None
    ) -> None:
        self._stats = replica_stats

    def describe(self):
        return []

    def collect(self):
        # min(moe_serve:engine_replica_healthy) == 0   -- alert: a replica is down
        healthy = GaugeMetricFamily(
            "moe_serve:engine_replica_healthy", "1 if the replica passed its last probe", labels=["replica"]
        )
        # sum by (replica) (moe_serve:engine_replica_outstanding)   -- balance across replicas
        outstanding = GaugeMetricFamily(
            "moe_serve:engine_replica_outstanding", "Requests in flight on the replica", labels=["replica"]
        )
        for stat in self._stats():
            healthy.add_metric([stat.url], 1.0 if stat.healthy else 0.0)
            outstanding.add_metric([stat.url], float(stat.outstanding))
        yield healthy
        yield outstanding


class _StoreCollector:
    """The shared limits store (Redis) as this gateway sees it, at scrape time (limits_outage.py)."""

    def __init__(self, stats: Callable[[], StoreStats]) -> None:
        self._stats = stats

    def describe(self):
        return []

    def collect(self):
        stats = self._stats()
        # min(moe_serve:limits_store_up) == 0   -- alert: a gateway cannot reach Redis (limits fail open or closed)
        yield GaugeMetricFamily("moe_serve:limits_store_up", "1 if the last limits-store call succeeded", stats.up)
        # max(moe_serve:limits_pending_settlements)   -- charges waiting for the store to come back
        yield GaugeMetricFamily(
            "moe_serve:limits_pending_settlements", "Settlements and cancels queued for the store", stats.pending
        )
        # sum(rate(moe_serve:limits_local_admissions_total[5m]))   -- admitted by in-process limits during outages
        yield CounterMetricFamily(
            "moe_serve:limits_local_admissions", "Requests admitted by in-process limits", stats.local_admissions
        )
