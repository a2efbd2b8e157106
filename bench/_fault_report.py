"""What a fault run shows: outcome table, errors by code, recovery time after each fault, and the timeline plot."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench._common import figure, save_figure
from bench._outcomes import OUTCOMES, Outcome


def summarize(outcomes: list[Outcome]) -> dict:
    counts = Counter(o.outcome for o in outcomes)
    errors = Counter((o.status, o.code) for o in outcomes if o.outcome == "error")
    failures = [o.row() for o in outcomes if o.outcome in ("lost", "duplicated")]
    return {
        **{name: counts.get(name, 0) for name in OUTCOMES},
        "table": [{"outcome": name, "count": counts.get(name, 0)} for name in OUTCOMES],
        "errors_by_code": [
            {"status": status, "code": code, "count": n} for (status, code), n in sorted(errors.items(), key=str)
        ],
        "failures": failures[:50],
    }


def _first(samples: list[dict], after: float, key: str, value: float) -> float | None:
    return next((s["t_s"] for s in samples if s["t_s"] >= after and s.get(key) == value), None)


def recovery(events: list[dict], samples: list[dict], outcomes: list[Outcome], urls: list[str]) -> dict:
    """Seconds from each fault to the gateway using what came back, and the requests that ended in between.

    engine: kill -> requests are outstanding on the restarted replica again (the gateway routes to it);
    redis: start -> the gateway's next store call succeeds and its queued settlements are replayed (pending 0)."""
    at = {e["event"]: e["t_s"] for e in events}
    out = {}
    if "engine_kill" in at:
        kill = at["engine_kill"]
        down = _first(samples, kill, "healthy:1", 0.0)
        healthy = _first(samples, down if down is not None else kill, "healthy:1", 1.0)
        back = next((s["t_s"] for s in samples if s["t_s"] >= (healthy or kill) and s.get("outstanding:1")), None)
        window = [o for o in outcomes if kill <= o.end_s <= (back or kill)]
        out["engine"] = {
            "killed_at_s": kill,
            "gateway_saw_down_s": None if down is None else down - kill,
            "engine_ready_s": at["engine_ready"] - kill if "engine_ready" in at else None,
            "gateway_saw_up_s": None if healthy is None else healthy - kill,
            "recovery_s": None if back is None else back - kill,  # requests on the restarted replica again
            "outcomes_meanwhile": dict(Counter(o.outcome for o in window)),
            "errors_meanwhile": dict(Counter(o.code for o in window if o.outcome == "error")),
        }
    if "redis_stop" in at and "redis_start" in at:
        stop, start = at["redis_stop"], at["redis_start"]
        down = _first(samples, stop, "limits_store_up", 0.0)
        back = _first(samples, start, "limits_store_up", 1.0)
        settled = None
        if back is not None:
            settled = next(
                (s["t_s"] for s in samples if s["t_s"] >= back and not s.get("limits_pending_settlements")), None
            )
        window = [o for o in outcomes if stop <= o.end_s <= (back or start)]
        out["redis"] = {
            "stopped_at_s": stop,
            "outage_s": start - stop,
            "gateway_saw_down_s": None if down is None else down - stop,
            "recovery_s": None if back is None else back - start,
            "settled_s": None if settled is None else settled - start,
            "outcomes_meanwhile": dict(Counter(o.outcome for o in window)),
            "errors_meanwhile": dict(Counter(o.code for o in window if o.outcome == "error")),
        }
    return out


COLORS = {"complete": "tab:green", "error": "tab:orange", "lost": "tab:red", "duplicated": "tab:purple"}


def plot_timeline(outcomes: list[Outcome], samples: list[dict], events: list[dict], urls: list[str], path: Path):
    fig, (top, mid, low) = figure(3, (13, 3.6))
    end = max([o.end_s for o in outcomes] + [s["t_s"] for s in samples] + [1.0])
    bins = list(range(int(end) + 2))
    kinds = [k for k in COLORS if any(o.outcome == k for o in outcomes)]
    top.hist([[o.sent_s for o in outcomes if o.outcome == k] for k in kinds], bins=bins, stacked=True,
             color=[COLORS[k] for k in kinds], label=[f"{k} ({sum(o.outcome == k for o in outcomes)})" for k in kinds])  # fmt: skip
    top.set_xlabel("request sent at (s)")
    top.set_ylabel("requests / s")
    top.legend(fontsize=7)
    for i in range(len(urls)):
        t = [s["t_s"] for s in samples if f"outstanding:{i}" in s]
        mid.plot(t, [s[f"outstanding:{i}"] for s in samples if f"outstanding:{i}" in s], label=f"replica {i}")
    _shade(mid, samples, "healthy:1", "tab:red", "replica 1 down")
    _shade(mid, samples, "limits_store_up", "tab:grey", "Redis down")
    mid.set_xlabel("time (s)")
    mid.set_ylabel("outstanding requests (gateway view)")
    mid.legend(fontsize=6)
    low.plot([s["t_s"] for s in samples], [s["rss_mb"] for s in samples], color="tab:blue")
    low.set_xlabel("time (s)")
    low.set_ylabel("gateway RSS (MB)")
    for axis in (top, mid, low):
        for e in events:
            axis.axvline(e["t_s"], color="grey", linewidth=0.8)
            if axis is top:
                axis.text(e["t_s"], axis.get_ylim()[1] * 0.95, e["event"], rotation=90, fontsize=6, va="top")
    save_figure(fig, path, "Fault-injected replay through the gateway")


def _shade(axis, samples: list[dict], key: str, color: str, label: str) -> None:
    """Shade the sample intervals where `key` reads 0 (down)."""
    labelled = False
    for a, b in zip(samples, samples[1:], strict=False):
        if a.get(key) == 0.0:
            axis.axvspan(a["t_s"], b["t_s"], color=color, alpha=0.2, linewidth=0, label=None if labelled else label)
            labelled = True
