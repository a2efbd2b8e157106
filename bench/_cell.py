"""One cell of an interleaved benchmark: every variant measured in rounds, wave by wave in rotated order, each
round's waves merged into one measurement, and a row per variant with the median and min-max over rounds."""

from __future__ import annotations

import statistics
import time

import httpx

from bench._load import run_batch, served_model


def flush_cache(url: str, wait_s: float = 10.0) -> None:
    """Reset SGLang's radix cache and NGRAM corpus (vLLM's n-gram drafts only from the request itself). SGLang
    refuses (400) while a request is still in its running batch, which a request whose last token the client has
    already received can be until the scheduler's next iteration: asked again until `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        status = httpx.post(f"{url}/flush_cache", timeout=60).status_code
        if status in (200, 404):
            return
        if status != 400 or time.monotonic() > deadline:
            raise RuntimeError(f"{url}/flush_cache failed ({status})")
        time.sleep(0.05)


def rotated(names: list[str], round_: int) -> list[str]:
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


def measure_cell(variants: dict, prompts: list, tokens: int, batch: int, repeats: int) -> dict[str, list[dict]]:
    """`variants[name] = (url, extra body)`. A variant's measurement in a round is its run over all `prompts`, in
    waves of `batch` concurrent requests; the waves interleave across variants: wave w of every variant runs before
    wave w + 1 of any, in an order rotated by round and wave. On this shared machine load from other jobs comes in
    bursts (decode steps 30-60 % slower for ~10 s in an engine's step log), longer than one batch-1 request and
    shorter than a variant's whole measurement: interleaved per wave, a burst falls on all variants alike instead of
    deciding one variant's round. Returns each variant's per-round results (its waves merged, `merged`)."""
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    models = {url: served_model(url) for url, _ in variants.values()}
    waves = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    for round_ in range(repeats):
        parts: dict[str, list[dict]] = {name: [] for name in variants}
        for w, wave in enumerate(waves):
            for name in rotated(list(variants), round_ + w):
                url, extra = variants[name]
                flush_cache(url)
                parts[name].append(run_batch(url, models[url], wave, tokens, batch, extra))
        for name, results in parts.items():
            runs[name].append(merged(results))
    return runs


def merged(results: list[dict]) -> dict:
    """One measurement from the run_batch results of its waves: means over requests (weighted by each wave's
    requests; ITL over the waves that have one), the worst wave's P90 TPOT, tokens per second over the waves' summed
    wall time, steal share weighted by the waves' wall time."""
    if len(results) == 1:
        return results[0]
    n = sum(r["requests"] for r in results)
    out: dict = {"requests": n, "per_request": [row for r in results for row in r.get("per_request", ())]}
    for key in ("tpot_ms", "ttft_ms", "e2e_per_token_ms"):
        out[key] = sum(r[key] * r["requests"] for r in results) / n
    timed = [r for r in results if r.get("itl_ms") is not None]  # a wave streamed in one chunk has no ITL
    out["itl_ms"] = (
        sum(r["itl_ms"] * r["requests"] for r in timed) / sum(r["requests"] for r in timed) if timed else None
    )
    out["tpot_p90_ms"] = max(r["tpot_p90_ms"] for r in results)
    stolen = [r for r in results if r.get("steal_share") is not None]
    out["steal_share"] = (
        sum(r["steal_share"] * r["wall_s"] for r in stolen) / sum(r["wall_s"] for r in stolen) if stolen else None
    )
    out["tokens_per_s"] = sum(r["tokens"] for r in results) / sum(r["wall_s"] for r in results)
    return out


def cell_rows(runs: dict[str, list[dict]], **keys) -> list[dict]:
    """One row per variant: median of every metric over rounds, min-max of TPOT, e2e per token and steal share, the
    rounds, and each round's requests (`per_request_rounds`, rows of bench._load.REQUEST_FIELDS)."""
    rows = []
    for name, results in runs.items():
        row = {**keys, "policy": name, "rounds": len(results)}
        row |= {
            key: statistics.median(r[key] for r in results)
            for key in results[0]
            if key != "per_request" and all(r.get(key) is not None for r in results)
        }
        if all("per_request" in r for r in results):
            row["per_request_rounds"] = [r["per_request"] for r in results]
        for metric in ("tpot_ms", "e2e_per_token_ms", "steal_share"):
            if any(r.get(metric) is None for r in results):
                continue
            values = [r[metric] for r in results]
            row[f"{metric}_min"], row[f"{metric}_max"] = min(values), max(values)
            row[f"{metric}_rounds"] = values
        rows.append(row)
    return rows
