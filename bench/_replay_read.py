"""Reading `bench.replay`'s replays: each against its repetition's SLO (none's P90 TPOT in it, `judged`), the
requests over it (`misses`), the medians over repetitions (`aggregate`) and issue 16's replay goals (`goals`)."""

from __future__ import annotations

import statistics

from service.traces.report import Slo, goodput, summarize, tpot_s

SLO_SCALES = (0.8, 1.0, 1.2)


def misses(result, slo_tpot_ms: float) -> list[dict]:
    """The requests over the TPOT SLO, each with where its time went: its TPOT, TTFT, the interval after its first
    token (a prefill of a later arrival that ran there lands in it) and its longest interval."""
    out = []
    for r in result.records:
        tpot = tpot_s(r)
        if r.error is None and (tpot is None or tpot * 1e3 <= slo_tpot_ms):
            continue
        out.append(
            {
                "index": r.index,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "error": r.error,
                "ttft_ms": None if r.ttft_s is None else r.ttft_s * 1e3,
                "tpot_ms": None if tpot is None else tpot * 1e3,
                "first_itl_ms": r.itl_s[0] * 1e3 if r.itl_s else None,
                "max_itl_ms": max(r.itl_s) * 1e3 if r.itl_s else None,
            }
        )
    return out


def row(
    trace: str,
    policy: str,
    result,
    slo_tpot_ms: float,
    sync_slo_tpot_ms: float | None = None,
    pre_slo_tpot_ms: float | None = None,
) -> dict:
    """One replay's summary: attainment at the SLO's scales (SLO = none's P90 TPOT) and, where `sync_slo_tpot_ms` is
    given, at scale 1 of none-sync's P90 TPOT (`sync_slo_x1`), the no-speculation baseline in the speculative
    engines' own scheduling mode; where `pre_slo_tpot_ms` is given, at the SLO measured before the repetitions
    (`pre_slo_x1`)."""
    summary = summarize(result, Slo(tpot_ms=slo_tpot_ms))
    out = {"trace": trace, "policy": policy, "requests": len(result.records), "failed": summary["failed"]}
    out["misses"] = misses(result, slo_tpot_ms)
    out["errors"] = sorted({f"input {r.input_tokens}: {r.error}" for r in result.records if r.error})
    for scale in SLO_SCALES:
        g = goodput(result.records, Slo(tpot_ms=scale * slo_tpot_ms), result.duration_s)
        out[f"slo_x{scale:g}"] = g["slo_attainment"]
    for key, at in (("sync_slo_x1", sync_slo_tpot_ms), ("pre_slo_x1", pre_slo_tpot_ms)):
        if at is not None:
            out[key] = goodput(result.records, Slo(tpot_ms=at), result.duration_s)["slo_attainment"]
    out["slo_tpot_ms"] = slo_tpot_ms
    out["goodput_rps"] = goodput(result.records, Slo(tpot_ms=slo_tpot_ms), result.duration_s)["request_goodput"]
    tpot = summary["tpot_ms"] or {}
    out["tpot_p50_ms"], out["tpot_p99_ms"] = tpot.get("median"), tpot.get("p99")
    out["accept_length"] = (summary.get("speculation") or {}).get("mean_accept_length")
    return out


def judged(
    replays: dict[tuple, object], drafters, pre_slo: dict[str, float], pre_sync_slo: dict[str, float]
) -> tuple[dict[tuple, list[dict]], dict[str, list[dict]]]:
    """Each replay's row against its repetition's SLO: none's P90 TPOT in that repetition (none-sync's for
    `sync_slo_x1`), with attainment at the SLO measured before the repetitions as `pre_slo_x1`. `replays` maps
    (repetition, trace, drafter or None for none and none-sync, policy) to a ReplayResult. Returns (drafter, trace,
    policy) -> one row per repetition (none's and none-sync's in every drafter's), and per trace each repetition's
    SLOs."""
    runs: dict[tuple, list[dict]] = {}
    rep_slo: dict[str, list[dict]] = {}
    groups: dict[tuple, dict] = {}  # (repetition, trace) -> (drafter, policy) -> result
    for (rep, name, drafter, policy), result in replays.items():
        groups.setdefault((rep, name), {})[(drafter, policy)] = result
    for (_, name), results in groups.items():
        slos = {}
        for policy, pre in (("none", pre_slo), ("none-sync", pre_sync_slo)):
            base = results.get((None, policy))
            p90 = None if base is None else (summarize(base)["tpot_ms"] or {}).get("p90")
            slos[policy] = pre.get(name) if p90 is None else p90  # none without a TPOT: the SLO measured first
        rep_slo.setdefault(name, []).append(slos)
        for (drafter, policy), result in results.items():
            measured = row(name, policy, result, slos["none"], slos["none-sync"], pre_slo[name])
            for d in drafters if drafter is None else (drafter,):
                runs.setdefault((d, name, policy), []).append(measured)
    return runs, rep_slo


def aggregate(runs: dict[tuple, list[dict]]) -> list[dict]:
    """One row per (drafter, trace, policy): medians over repetitions, min-max of attainment and TPOT p50, and the
    TPOT speedup over "none" of the same drafter phase (ratio of medians)."""
    rows = []
    for (drafter, trace, policy), reps in runs.items():
        out = {"drafter": drafter, "trace": trace, "policy": policy, "repeats": len(reps)}
        out["requests"], out["failed"] = reps[0]["requests"], sum(r["failed"] for r in reps)
        out["errors"] = sorted({e for r in reps for e in r["errors"]})
        out["misses"] = [r["misses"] for r in reps]  # per repetition: the requests over the SLO at x1 (misses())
        keys = [f"slo_x{s:g}" for s in SLO_SCALES] + ["sync_slo_x1", "pre_slo_x1", "slo_tpot_ms"]
        keys += ["goodput_rps", "tpot_p50_ms", "tpot_p99_ms"]
        for key in [*keys, "accept_length"]:
            values = [r[key] for r in reps if r.get(key) is not None]
            out[key] = statistics.median(values) if values else None
            if key in ("slo_x1", "tpot_p50_ms") and values:
                out[f"{key}_min"], out[f"{key}_max"] = min(values), max(values)
        rows.append(out)
    for r in rows:
        for key, policy in (("tpot_speedup", "none"), ("tpot_speedup_sync", "none-sync")):
            base = _base(rows, r, policy)
            if base is not None:
                r[key] = base["tpot_p50_ms"] / r["tpot_p50_ms"] if r["tpot_p50_ms"] else None
    return rows


def _base(rows: list[dict], r: dict, policy: str) -> dict | None:
    """The row of `policy` ("none" or "none-sync") in r's drafter and trace."""
    return next(
        (b for b in rows if (b["drafter"], b["trace"], b["policy"]) == (r["drafter"], r["trace"], policy)), None
    )


def goals(rows: list[dict]) -> list[dict]:
    """Issue 16's replay goals at SLO scale 1.0, worst over (drafter, trace): against "none" (SGLang's overlap
    scheduler, the issue's baseline) and, where it ran, against "none-sync" (the plain engine stepping synchronously,
    as every speculative engine here does): the two modes stream a request's first token at different steps, so a
    prefill that runs right after a request's own lands in its TTFT under overlap and in its TPOT synchronously."""
    out = []
    against = [("none", "slo_x1", "tpot_speedup", "SLO x1")]
    if any(r["policy"] == "none-sync" for r in rows):
        against.append(("none-sync", "sync_slo_x1", "tpot_speedup_sync", "none-sync's SLO x1"))
    mine = [r for r in rows if r["policy"] == "moe-serve"]
    for base, attained, speedup, slo in against:
        if mine:
            att, speed = min(r[attained] for r in mine), min(r[speedup] for r in mine)
            out.append(_goal(f"moe-serve attainment at {slo} (worst cell)", att, ">= 0.95", att >= 0.95))
            out.append(_goal(f"moe-serve TPOT speedup vs {base} (worst cell)", speed, ">= 1.25", speed >= 1.25))
        behind = [
            f"{r['drafter']}/{r['trace']}"
            for r in rows
            if r["policy"] == "adaspec" and r[attained] < _base(rows, r, base)[attained]
        ]
        if any(r["policy"] == "adaspec" for r in rows):
            goal = f"adaspec cells below {base}'s attainment at {slo}"
            out.append(_goal(goal, float(len(behind)), "0", not behind, ", ".join(behind)))
    return out


def _goal(goal: str, value: float, target: str, met: bool, detail: str = "") -> dict:
    return {"goal": goal, "value": value, "target": target, "met": met, "detail": detail}
