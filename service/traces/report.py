"""Replay report: latency percentiles, goodput and SLO attainment, over the run and over time (issue 6, item 3).

Definitions follow `vllm bench serve` and SGLang's `bench_serving` (sglang/benchmark/serving.py, goodput.py):
- TTFT, E2E: per successful request; ITL: every gap between streamed chunks, pooled over requests.
- TPOT = (E2E - TTFT) / (output_tokens - 1), over successful requests with more than one output token.
- Percentiles: numpy's default (linear interpolation); mean, median, std alongside.
- A request is good when it succeeded and every given SLO holds with `observed <= slo` (a 1-token request's TPOT
  counts as 0). request_goodput = good / duration; slo_attainment = good / requests sent; per-metric attainment alike.
- Throughputs divide by the duration: completed requests, output tokens, input + output tokens.
- concurrency = sum of E2E / duration (SGLang's mean in-flight requests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service.traces.replay import ReplayResult, RequestRecord

PERCENTILES = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None  # milliseconds; None means no TTFT objective
    tpot_ms: float | None = None  # milliseconds
    e2el_ms: float | None = None  # milliseconds

    def as_dict(self) -> dict[str, float]:
        given = {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2el": self.e2el_ms}
        return {k: v for k, v in given.items() if v is not None}


def tpot_s(record: RequestRecord) -> float | None:
    """Seconds per output token after the first; None for failed or single-token requests."""
    if not record.success or record.output_tokens <= 1 or record.ttft_s is None or record.e2e_s is None:
        return None
    return (record.e2e_s - record.ttft_s) / (record.output_tokens - 1)


def distribution_ms(values_s: list[float], percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, float] | None:
    """mean/median/std/pXX in milliseconds; None when there are no values."""
    if not values_s:
        return None
    ms = np.asarray(values_s, dtype=float) * 1000.0
    out = {"mean": float(ms.mean()), "median": float(np.median(ms)), "std": float(ms.std())}
    out.update({f"p{p:g}": float(np.percentile(ms, p)) for p in percentiles})
    out["max"] = float(ms.max())
    return out


def summarize(result: ReplayResult, slo: Slo = Slo(), percentiles: tuple[float, ...] = PERCENTILES) -> dict:
    records = result.records
    done = [r for r in records if r.success]
    dur = result.duration_s
    if dur <= 0:
        raise ValueError("replay duration must be positive to compute rates")
    total_in = sum(r.input_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    tpots = [t for t in map(tpot_s, done) if t is not None]
    summary = {
        "requests": len(records),
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration_s": dur,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "concurrency": sum(r.e2e_s for r in done) / dur,
        "ttft_ms": distribution_ms([r.ttft_s for r in done], percentiles),
        "tpot_ms": distribution_ms(tpots, percentiles),
        "itl_ms": distribution_ms([gap for r in done for gap in r.itl_s], percentiles),
        "e2el_ms": distribution_ms([r.e2e_s for r in done], percentiles),
        "lateness_ms": distribution_ms([r.lateness_s for r in records], percentiles),
        "errors": _error_counts(records),
    }
    summary.update(goodput(records, slo, dur))
    summary["speculation"] = speculation(done)
    return summary


def goodput(records: tuple[RequestRecord, ...], slo: Slo, duration_s: float) -> dict:
    slos = slo.as_dict()
    if not slos:
        return {"slo_ms": {}, "request_goodput": None, "slo_attainment": None, "slo_attainment_by_metric": {}}
    good = 0
    met = dict.fromkeys(slos, 0)
    for r in records:
        if not r.success:
            continue
        observed_ms = {"ttft": r.ttft_s * 1000, "tpot": (tpot_s(r) or 0.0) * 1000, "e2el": r.e2e_s * 1000}
        ok = [name for name, limit in slos.items() if observed_ms[name] <= limit]
        for name in ok:
            met[name] += 1
        good += len(ok) == len(slos)
    n = len(records)
    return {
        "slo_ms": slos,
        "good_requests": good,
        "request_goodput": good / duration_s,
        "slo_attainment": good / n if n else None,
        "slo_attainment_by_metric": {name: count / n for name, count in met.items()} if n else {},
    }


def speculation(done: list[RequestRecord]) -> dict | None:
    """Engine-reported speculation stats, where the server returned them (SGLang spec_tokens_details)."""
    with_spec = [r for r in done if r.spec]
    if not with_spec:
        return None
    accept = [float(r.spec["spec_accept_length"]) for r in with_spec if "spec_accept_length" in r.spec]
    verify = [(int(r.spec["spec_verify_ct"]), r.output_tokens) for r in with_spec if r.spec.get("spec_verify_ct")]
    return {
        "requests": len(with_spec),
        "mean_accept_length": float(np.mean(accept)) if accept else None,
        "verify_steps": sum(v for v, _ in verify),
        # Output tokens per verify step, weighted by tokens: a run-level accept length.
        "tokens_per_verify_step": sum(n for _, n in verify) / sum(v for v, _ in verify) if verify else None,
    }


def time_series(result: ReplayResult, bucket_s: float | None = None) -> list[dict]:
    """Per bucket of due time: arrival rate, completions, errors and p50/p99 TTFT and TPOT (ms) of its requests."""
    records = result.records
    if not records:
        return []
    last_due = max(r.due_s for r in records)
    bucket = bucket_s or max(1.0, last_due / 60.0)
    n_buckets = int(last_due // bucket) + 1
    rows = []
    for b in range(n_buckets):
        group = [r for r in records if int(r.due_s // bucket) == b]
        done = [r for r in group if r.success]
        ttft = [r.ttft_s * 1000 for r in done]
        tpot = [t * 1000 for t in map(tpot_s, done) if t is not None]
        rows.append(
            {
                "start_s": b * bucket,
                "arrival_rate": len(group) / bucket,
                "completed": len(done),
                "errors": len(group) - len(done),
                "ttft_p50_ms": _pct(ttft, 50),
                "ttft_p99_ms": _pct(ttft, 99),
                "tpot_p50_ms": _pct(tpot, 50),
                "tpot_p99_ms": _pct(tpot, 99),
            }
        )
    return rows


def _pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(values, p)) if values else None


def _error_counts(records: tuple[RequestRecord, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        if r.error:
            kind = r.error.split(":")[0]
            counts[kind] = counts.get(kind, 0) + 1
    return counts
