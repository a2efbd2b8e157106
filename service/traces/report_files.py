"""Write a replay report to a directory: summary.json, requests.csv, timeseries.csv and timeseries.png."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from service.traces.replay import ReplayResult
from service.traces.report import tpot_s

REQUEST_COLUMNS = (
    "index",
    "due_s",
    "sent_s",
    "lateness_ms",
    "input_tokens",
    "max_tokens",
    "prompt_tokens",
    "output_tokens",
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
    "mean_itl_ms",
    "spec_accept_length",
    "spec_verify_ct",
    "error",
)


def write_report(
    out_dir: str | Path, result: ReplayResult, summary: dict, series: list[dict], meta: dict
) -> list[Path]:
    """Write the four report files; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "summary.json", out / "requests.csv", out / "timeseries.csv", out / "timeseries.png"]
    paths[0].write_text(json.dumps({"meta": meta, "summary": summary, "timeseries": series}, indent=2) + "\n")
    with paths[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(REQUEST_COLUMNS)
        for r in result.records:
            tpot = tpot_s(r)
            spec = r.spec or {}
            w.writerow(
                [
                    r.index,
                    f"{r.due_s:.6f}",
                    f"{r.sent_s:.6f}",
                    f"{r.lateness_s * 1000:.3f}",
                    r.input_tokens,
                    r.max_tokens,
                    "" if r.prompt_tokens is None else r.prompt_tokens,
                    r.output_tokens,
                    _ms(r.ttft_s),
                    _ms(tpot),
                    _ms(r.e2e_s),
                    _ms(sum(r.itl_s) / len(r.itl_s) if r.itl_s else None),
                    spec.get("spec_accept_length", ""),
                    spec.get("spec_verify_ct", ""),
                    r.error or "",
                ]
            )
    with paths[2].open("w", newline="") as f:
        if series:
            w = csv.DictWriter(f, fieldnames=list(series[0]))
            w.writeheader()
            w.writerows(series)
    _plot(paths[3], series, meta.get("title", "replay"))
    return paths


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1000:.3f}"


def _plot(path: Path, series: list[dict], title: str) -> None:
    if not series:
        return
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    t = [row["start_s"] for row in series]
    fig, (ax_rate, ax_lat) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    rates = [row["arrival_rate"] for row in series]
    width = t[1] - t[0] if len(t) > 1 else 1.0
    ax_rate.step([*t, t[-1] + width], [*rates, rates[-1]], where="post")  # close the last bucket
    ax_rate.set_ylabel("arrivals (req/s)")
    ax_rate.set_title(title)
    for key, style in (("ttft_p50_ms", "-"), ("ttft_p99_ms", "--"), ("tpot_p50_ms", "-"), ("tpot_p99_ms", "--")):
        values = [row[key] if row[key] is not None else float("nan") for row in series]
        ax_lat.plot(t, values, style, marker=".", label=key.replace("_ms", ""))
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_xlabel("schedule time (s)")
    ax_lat.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
