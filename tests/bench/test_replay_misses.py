"""bench.replay's per-request account of SLO misses: which requests were over the TPOT SLO (or failed), with where
their time went (the first interval holds a prefill that ran right after the request's own); its goals; its
arguments."""

from service.traces.replay import ReplayResult, RequestRecord


def record(index: int, ttft_s: float, itl_s: tuple[float, ...], error: str | None = None) -> RequestRecord:
    e2e = None if error else ttft_s + sum(itl_s)
    return RequestRecord(
        index=index,
        due_s=0.0,
        sent_s=0.0,
        input_tokens=100,
        max_tokens=len(itl_s) + 1,
        ttft_s=ttft_s,
        itl_s=itl_s,
        e2e_s=e2e,
        output_tokens=len(itl_s) + 1,
        prompt_tokens=100,
        error=error,
    )


def test_misses_lists_the_requests_over_the_slo_with_their_intervals():
    from bench._replay_read import misses

    stalled = record(0, 0.5, (3.0,) + (0.08,) * 22)  # its first interval holds another request's prefill
    steady = record(1, 3.5, (0.08,) * 23)
    one_token = record(2, 0.5, ())  # no TPOT: not a miss
    failed = record(3, 0.5, (0.08,), error="HTTP 500")
    result = ReplayResult(records=(stalled, steady, one_token, failed), duration_s=6.0, started_unix_s=0.0)
    out = misses(result, slo_tpot_ms=100.0)
    assert [m["index"] for m in out] == [0, 3]
    assert out[0]["first_itl_ms"] == 3000.0 and out[0]["max_itl_ms"] == 3000.0
    assert abs(out[0]["tpot_ms"] - (3.0 + 22 * 0.08) / 23 * 1e3) < 1e-6 and out[0]["ttft_ms"] == 500.0
    assert out[1]["error"] == "HTTP 500" and out[1]["tpot_ms"] is None
    assert misses(result, slo_tpot_ms=300.0) == [out[1]]


def test_goals_read_against_none_and_none_sync():
    """The replay goals are reported against the overlap engine ("none") and against the plain engine stepping
    synchronously ("none-sync"); attainment at none-sync's SLO comes from the row's own records."""
    from bench._replay_read import aggregate, goals, row

    fast = ReplayResult(records=(record(0, 0.5, (0.05,) * 23),), duration_s=2.0, started_unix_s=0.0)
    slow = ReplayResult(records=(record(0, 0.5, (0.12,) * 23),), duration_s=3.5, started_unix_s=0.0)
    runs = {}
    for policy, result in (("none", fast), ("none-sync", slow), ("moe-serve", slow), ("adaspec", fast)):
        runs[("ngram", "mooncake", policy)] = [row("mooncake", policy, result, 100.0, 150.0)]
    rows = aggregate(runs)
    mine = next(r for r in rows if r["policy"] == "moe-serve")
    assert mine["slo_x1"] == 0.0 and mine["sync_slo_x1"] == 1.0
    assert abs(mine["tpot_speedup"] - 0.05 / 0.12) < 1e-9 and mine["tpot_speedup_sync"] == 1.0
    read = {g["goal"]: g for g in goals(rows)}
    assert not read["moe-serve attainment at SLO x1 (worst cell)"]["met"]
    assert read["moe-serve attainment at none-sync's SLO x1 (worst cell)"]["met"]
    assert not read["moe-serve TPOT speedup vs none-sync (worst cell)"]["met"]  # 1.0, goal 1.25
    assert read["adaspec cells below none's attainment at SLO x1"]["met"]
    # without a none-sync row (--quick) the goals are the three against none only
    quick = aggregate({k: v for k, v in runs.items() if k[2] != "none-sync"})
    assert [g["goal"] for g in goals(quick)] == [
        "moe-serve attainment at SLO x1 (worst cell)",
        "moe-serve TPOT speedup vs none (worst cell)",
        "adaspec cells below none's attainment at SLO x1",
    ]


def test_an_unknown_policy_is_refused_before_any_engine_starts(capsys):
    import pytest

    from bench.replay import main

    with pytest.raises(SystemExit) as stopped:
        main(["--policies", "k0,static-7", "--out", "/nonexistent/never-written"])
    assert stopped.value.code == 2
    assert "unknown policies ['static-7']" in capsys.readouterr().err


def test_a_run_without_goal_rows_prints_an_empty_goals_table():
    """A development run without moe-serve and adaspec (`--policies k0`) has no goal rows: the table is its header."""
    from bench._common import table
    from bench._replay_read import goals

    none = {"drafter": "ngram", "trace": "azure", "policy": "none", "slo_x1": 0.9, "tpot_speedup": 1.0}
    floor = none | {"policy": "k0", "slo_x1": 0.8, "tpot_speedup": 0.9}
    assert goals([none, floor]) == []
    assert table([], ["goal", "value"]).splitlines() == ["goal  value", "----  -----"]


def test_each_repetition_is_judged_against_none_in_that_repetition():
    """A window whose requests decode together gives TPOTs within a few percent of each other: the SLO is none's P90
    in the same repetition, so a host 10 % slower in one repetition moves none and the policy together; attainment
    at the SLO measured before the repetitions is kept as `pre_slo_x1`."""
    from bench._replay_read import aggregate, judged

    def window(step_s: float, n: int = 10) -> ReplayResult:
        records = tuple(record(i, 0.5, (step_s * (1 + i / 1e5),) * 23) for i in range(n))
        return ReplayResult(records=records, duration_s=3.0, started_unix_s=0.0)

    replays = {}
    for rep, slower in enumerate((1.0, 1.1)):  # the second repetition on a host 10 % slower
        replays[(rep, "mooncake", None, "none")] = window(0.050 * slower)
        replays[(rep, "mooncake", None, "none-sync")] = window(0.052 * slower)
        replays[(rep, "mooncake", "ngram", "moe-serve")] = window(0.045 * slower)
    runs, rep_slo = judged(replays, ("ngram", "standalone"), {"mooncake": 50.5}, {"mooncake": 52.0})
    assert [round(s["none"], 1) for s in rep_slo["mooncake"]] == [50.0, 55.0]
    assert [round(s["none-sync"], 1) for s in rep_slo["mooncake"]] == [52.0, 57.2]
    assert [r["slo_x1"] for r in runs[("ngram", "mooncake", "none")]] == [0.9, 0.9]  # 9 of 10 at or under its P90
    assert [r["pre_slo_x1"] for r in runs[("ngram", "mooncake", "none")]] == [1.0, 0.0]  # drift, not policy
    assert [r["slo_x1"] for r in runs[("ngram", "mooncake", "moe-serve")]] == [1.0, 1.0]
    assert [r["sync_slo_x1"] for r in runs[("ngram", "mooncake", "moe-serve")]] == [1.0, 1.0]
    assert ("standalone", "mooncake", "none") in runs and ("standalone", "mooncake", "moe-serve") not in runs
    rows = {r["policy"]: r for r in aggregate(runs) if r["drafter"] == "ngram"}
    assert rows["moe-serve"]["slo_x1"] == 1.0 and rows["none"]["pre_slo_x1"] == 0.5
    assert abs(rows["moe-serve"]["tpot_speedup"] - 50 / 45) < 1e-3


def test_a_repetition_whose_none_has_no_tpot_falls_back_to_the_slo_measured_first():
    from bench._replay_read import judged

    failed = ReplayResult(records=(record(0, 0.5, (0.05,), error="HTTP 500"),), duration_s=1.0, started_unix_s=0.0)
    ok = ReplayResult(records=(record(0, 0.5, (0.05,) * 23),), duration_s=1.0, started_unix_s=0.0)
    replays = {(0, "azure", None, "none"): failed, (0, "azure", "ngram", "moe-serve"): ok}
    runs, rep_slo = judged(replays, ("ngram",), {"azure": 60.0}, {})
    assert rep_slo["azure"] == [{"none": 60.0, "none-sync": None}]
    assert runs[("ngram", "azure", "moe-serve")][0]["slo_x1"] == 1.0
    assert "sync_slo_x1" not in runs[("ngram", "azure", "moe-serve")][0]
